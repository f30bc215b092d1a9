//! pprof out and in: gzipped `profile.proto` from frames and counted samples, such a file read
//! back (`decode`: bounded, every index checked), and the request body of Pyroscope's push API
//! (`push.v1.PusherService/Push`) around such profiles.
//!
//! The messages are written here with prost's derive from the field numbers of the public
//! schemas (google/pprof's `profile.proto`; Pyroscope's `push/v1/push.proto` and
//! `types/v1/types.proto`), only the fields sidecar fills in or reads: no code generation, no
//! protoc. Fields of other writers' files that are not declared here are skipped by prost.

use std::collections::HashMap;
use std::io::{Read, Write};

use flate2::read::GzDecoder;
use flate2::write::GzEncoder;
use flate2::Compression;
use prost::Message;

#[derive(Clone, PartialEq, Message)]
struct Profile {
    #[prost(message, repeated, tag = "1")]
    sample_type: Vec<ValueType>,
    #[prost(message, repeated, tag = "2")]
    sample: Vec<Sample>,
    #[prost(message, repeated, tag = "4")]
    location: Vec<Location>,
    #[prost(message, repeated, tag = "5")]
    function: Vec<Function>,
    #[prost(string, repeated, tag = "6")]
    string_table: Vec<String>,
    #[prost(int64, tag = "9")]
    time_nanos: i64,
    #[prost(int64, tag = "10")]
    duration_nanos: i64,
    #[prost(message, optional, tag = "11")]
    period_type: Option<ValueType>,
    #[prost(int64, tag = "12")]
    period: i64,
    #[prost(int64, repeated, tag = "13")]
    comment: Vec<i64>,
    #[prost(int64, tag = "14")]
    default_sample_type: i64,
}

#[derive(Clone, PartialEq, Message)]
struct ValueType {
    #[prost(int64, tag = "1")]
    r#type: i64,
    #[prost(int64, tag = "2")]
    unit: i64,
}

#[derive(Clone, PartialEq, Message)]
struct Sample {
    #[prost(uint64, repeated, tag = "1")]
    location_id: Vec<u64>,
    #[prost(int64, repeated, tag = "2")]
    value: Vec<i64>,
    #[prost(message, repeated, tag = "3")]
    label: Vec<Label>,
}

#[derive(Clone, PartialEq, Message)]
struct Label {
    #[prost(int64, tag = "1")]
    key: i64,
    #[prost(int64, tag = "2")]
    str: i64,
}

#[derive(Clone, PartialEq, Message)]
struct Location {
    #[prost(uint64, tag = "1")]
    id: u64,
    #[prost(uint64, tag = "3")]
    address: u64,
    #[prost(message, repeated, tag = "4")]
    line: Vec<Line>,
}

#[derive(Clone, PartialEq, Message)]
struct Line {
    #[prost(uint64, tag = "1")]
    function_id: u64,
    #[prost(int64, tag = "2")]
    line: i64,
}

#[derive(Clone, PartialEq, Message)]
struct Function {
    #[prost(uint64, tag = "1")]
    id: u64,
    #[prost(int64, tag = "2")]
    name: i64,
    #[prost(int64, tag = "3")]
    system_name: i64,
    #[prost(int64, tag = "4")]
    filename: i64,
    #[prost(int64, tag = "5")]
    start_line: i64,
}

#[derive(Clone, PartialEq, Message)]
struct PushRequest {
    #[prost(message, repeated, tag = "1")]
    series: Vec<RawProfileSeries>,
}

#[derive(Clone, PartialEq, Message)]
struct RawProfileSeries {
    #[prost(message, repeated, tag = "1")]
    labels: Vec<LabelPair>,
    #[prost(message, repeated, tag = "2")]
    samples: Vec<RawSample>,
}

#[derive(Clone, PartialEq, Message)]
struct LabelPair {
    #[prost(string, tag = "1")]
    name: String,
    #[prost(string, tag = "2")]
    value: String,
}

#[derive(Clone, PartialEq, Message)]
struct RawSample {
    #[prost(bytes = "vec", tag = "1")]
    raw_profile: Vec<u8>,
    #[prost(string, tag = "2")]
    id: String,
}

/// A frame: its folded text, function name, file ("" when it names no code location) and line.
pub type FrameIn = (String, String, String, i64);
/// A sample: a folded stack (root first, frames joined by ';'), one value per sample type,
/// (key, value) labels.
pub type SampleIn = (String, Vec<i64>, Vec<(String, String)>);

/// What a profile measures and over which span.
pub struct Header {
    /// (type, unit) per value of a sample, e.g. ("samples", "count"), ("wall", "nanoseconds").
    pub sample_types: Vec<(String, String)>,
    pub period_type: (String, String),
    pub period: i64,
    pub time_nanos: i64,
    pub duration_nanos: i64,
    pub comments: Vec<String>,
}

#[derive(Default)]
struct Strings {
    table: Vec<String>,
    index: HashMap<String, i64>,
}

impl Strings {
    fn new() -> Self {
        let mut strings = Strings::default();
        strings.get(""); // index 0 is the empty string, as the format requires
        strings
    }

    fn get(&mut self, text: &str) -> i64 {
        if let Some(&index) = self.index.get(text) {
            return index;
        }
        let index = self.table.len() as i64;
        self.table.push(text.to_owned());
        self.index.insert(text.to_owned(), index);
        index
    }
}

/// The profile.proto message, not compressed. Errors name a sample whose frame index or
/// number of values is out of line.
fn build(header: &Header, frames: &[FrameIn], samples: &[SampleIn]) -> Result<Vec<u8>, String> {
    let mut strings = Strings::new();
    let sample_type = header
        .sample_types
        .iter()
        .map(|(kind, unit)| ValueType {
            r#type: strings.get(kind),
            unit: strings.get(unit),
        })
        .collect::<Vec<_>>();
    if sample_type.is_empty() {
        return Err("a profile needs at least one sample type".into());
    }
    // one function (and one location) per distinct (name, file); the line is the location's
    let mut functions: Vec<Function> = Vec::new();
    let mut by_function: HashMap<(&str, &str), u64> = HashMap::new();
    let mut location = Vec::with_capacity(frames.len());
    let mut by_text: HashMap<&str, u64> = HashMap::with_capacity(frames.len());
    for (index, (text, name, file, line)) in frames.iter().enumerate() {
        by_text.insert(text.as_str(), index as u64 + 1);
        let next = functions.len() as u64 + 1;
        let function_id = *by_function
            .entry((name.as_str(), file.as_str()))
            .or_insert_with(|| {
                let name_index = strings.get(name);
                functions.push(Function {
                    id: next,
                    name: name_index,
                    system_name: name_index,
                    filename: strings.get(file),
                    start_line: 0,
                });
                next
            });
        location.push(Location {
            id: index as u64 + 1,
            address: 0,
            line: vec![Line {
                function_id,
                line: *line,
            }],
        });
    }
    let mut sample = Vec::with_capacity(samples.len());
    for (number, (stack, values, labels)) in samples.iter().enumerate() {
        if values.len() != sample_type.len() {
            return Err(format!(
                "sample {number} has {} values for {} sample types",
                values.len(),
                sample_type.len()
            ));
        }
        // pprof lists the innermost frame first
        let mut location_id = Vec::with_capacity(stack.len() / 16 + 1);
        for frame in stack.rsplit(';') {
            match by_text.get(frame) {
                Some(&id) => location_id.push(id),
                None => return Err(format!("sample {number} has a frame not listed: {frame:?}")),
            }
        }
        let label = labels
            .iter()
            .map(|(key, value)| Label {
                key: strings.get(key),
                str: strings.get(value),
            })
            .collect();
        sample.push(Sample {
            location_id,
            value: values.clone(),
            label,
        });
    }
    let period_type = Some(ValueType {
        r#type: strings.get(&header.period_type.0),
        unit: strings.get(&header.period_type.1),
    });
    let comment = header.comments.iter().map(|c| strings.get(c)).collect();
    let profile = Profile {
        sample_type,
        sample,
        location,
        function: functions,
        string_table: strings.table,
        time_nanos: header.time_nanos,
        duration_nanos: header.duration_nanos,
        period_type,
        period: header.period,
        comment,
        default_sample_type: 0,
    };
    Ok(profile.encode_to_vec())
}

/// Gzip at the fastest level: on profiles it costs a tenth of the default's CPU for output
/// about a tenth larger, and a profile is made every window.
fn gzip(data: &[u8]) -> Vec<u8> {
    let mut encoder = GzEncoder::new(Vec::with_capacity(data.len() / 4 + 64), Compression::fast());
    // writing to a Vec cannot fail
    encoder.write_all(data).expect("gzip into memory");
    encoder.finish().expect("gzip into memory")
}

/// A gzipped profile.proto.
pub fn encode(
    header: &Header,
    frames: &[FrameIn],
    samples: &[SampleIn],
) -> Result<Vec<u8>, String> {
    Ok(gzip(&build(header, frames, samples)?))
}

/// A pprof file read back: what its values measure, its frames (function, file, line) and its
/// samples (indexes into the frames, root first; one value per sample type).
#[derive(Debug)]
pub struct Decoded {
    pub sample_types: Vec<(String, String)>,
    /// The index of the default sample type in `sample_types`, when the file names one.
    pub default_type: Option<usize>,
    pub period_type: Option<(String, String)>,
    pub period: i64,
    pub comments: Vec<String>,
    pub frames: Vec<(String, String, i64)>,
    pub samples: Vec<(Vec<u32>, Vec<i64>)>,
}

/// A pprof file (gzipped or not) read back; `max_bytes` bounds the message once decompressed.
/// The error is one line: what is wrong.
pub fn decode(data: &[u8], max_bytes: usize) -> Result<Decoded, String> {
    let raw;
    let message: &[u8] = if data.starts_with(&[0x1f, 0x8b]) {
        let mut out = Vec::new();
        GzDecoder::new(data)
            .take(max_bytes as u64 + 1)
            .read_to_end(&mut out)
            .map_err(|err| format!("not a pprof file: its gzip stream is corrupt ({err})"))?;
        if out.len() > max_bytes {
            return Err(format!(
                "refused: more than {} MB once decompressed",
                max_bytes / (1024 * 1024)
            ));
        }
        raw = out;
        &raw
    } else {
        data
    };
    let profile = Profile::decode(message)
        .map_err(|err| format!("not a pprof file: its protobuf message is corrupt ({err})"))?;
    resolve(profile)
}

/// The profile's indexes resolved: strings, functions, locations; any index out of range is
/// refused.
fn resolve(profile: Profile) -> Result<Decoded, String> {
    let strings = &profile.string_table;
    let text = |index: i64, what: &str| -> Result<String, String> {
        usize::try_from(index)
            .ok()
            .and_then(|i| strings.get(i))
            .cloned()
            .ok_or_else(|| {
                format!(
                    "not a consistent pprof file: {what} names string {index} of {}",
                    strings.len()
                )
            })
    };
    let pair = |vt: &ValueType, what: &str| {
        Ok::<_, String>((text(vt.r#type, what)?, text(vt.unit, what)?))
    };
    let sample_types = profile
        .sample_type
        .iter()
        .map(|vt| pair(vt, "a sample type"))
        .collect::<Result<Vec<_>, _>>()?;
    let default_type = if profile.default_sample_type != 0 {
        let name = text(profile.default_sample_type, "the default sample type")?;
        sample_types.iter().position(|(kind, _)| *kind == name)
    } else {
        None
    };
    let period_type = profile
        .period_type
        .as_ref()
        .map(|vt| pair(vt, "the period type"))
        .transpose()?;
    let comments = profile
        .comment
        .iter()
        .map(|&c| text(c, "a comment"))
        .collect::<Result<Vec<_>, _>>()?;
    let mut functions: HashMap<u64, (String, String)> =
        HashMap::with_capacity(profile.function.len());
    for function in &profile.function {
        let name = text(function.name, "a function's name")?;
        let file = text(function.filename, "a function's file")?;
        functions.insert(function.id, (name, file));
    }
    // Each location's frames, caller first (pprof lists a location's inlined lines callee
    // first), as indexes into the distinct frames.
    let mut frames: Vec<(String, String, i64)> = Vec::new();
    let mut frame_index: HashMap<(String, String, i64), u32> = HashMap::new();
    let mut locations: HashMap<u64, Vec<u32>> = HashMap::with_capacity(profile.location.len());
    for location in &profile.location {
        let mut lines = Vec::with_capacity(location.line.len().max(1));
        let mut keys = Vec::with_capacity(lines.capacity());
        if location.line.is_empty() {
            keys.push((format!("0x{:x}", location.address), String::new(), 0));
        }
        for line in location.line.iter().rev() {
            let (name, file) = functions.get(&line.function_id).ok_or_else(|| {
                format!(
                    "not a consistent pprof file: location {} names function {}, which is not listed",
                    location.id, line.function_id
                )
            })?;
            keys.push((name.clone(), file.clone(), line.line));
        }
        for key in keys {
            let next =
                u32::try_from(frames.len()).map_err(|_| "refused: too many frames".to_owned())?;
            let index = *frame_index.entry(key.clone()).or_insert_with(|| {
                frames.push(key);
                next
            });
            lines.push(index);
        }
        locations.insert(location.id, lines);
    }
    let mut samples = Vec::with_capacity(profile.sample.len());
    for (number, sample) in profile.sample.into_iter().enumerate() {
        if sample.value.len() != sample_types.len() {
            return Err(format!(
                "not a consistent pprof file: sample {number} has {} values for {} sample types",
                sample.value.len(),
                sample_types.len()
            ));
        }
        let mut stack = Vec::with_capacity(sample.location_id.len() + 4);
        for id in sample.location_id.iter().rev() {
            let lines = locations.get(id).ok_or_else(|| {
                format!("not a consistent pprof file: sample {number} names location {id}, which is not listed")
            })?;
            stack.extend_from_slice(lines);
        }
        samples.push((stack, sample.value));
    }
    Ok(Decoded {
        sample_types,
        default_type,
        period_type,
        period: profile.period,
        comments,
        frames,
        samples,
    })
}

/// One series of a push request: its labels and its raw (gzipped pprof) profiles.
pub type SeriesIn = (Vec<(String, String)>, Vec<Vec<u8>>);

/// The protobuf body of `push.v1.PusherService/Push`.
pub fn push_request(series: Vec<SeriesIn>) -> Vec<u8> {
    let request = PushRequest {
        series: series
            .into_iter()
            .map(|(labels, profiles)| RawProfileSeries {
                labels: labels
                    .into_iter()
                    .map(|(name, value)| LabelPair { name, value })
                    .collect(),
                samples: profiles
                    .into_iter()
                    .map(|raw_profile| RawSample {
                        raw_profile,
                        id: String::new(),
                    })
                    .collect(),
            })
            .collect(),
    };
    request.encode_to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;
    use flate2::read::GzDecoder;
    use std::io::Read;

    fn header() -> Header {
        Header {
            sample_types: vec![("samples".into(), "count".into())],
            period_type: ("wall".into(), "nanoseconds".into()),
            period: 10_000_000,
            time_nanos: 1,
            duration_nanos: 2,
            comments: vec![],
        }
    }

    fn frame(text: &str, name: &str, file: &str, line: i64) -> FrameIn {
        (text.into(), name.into(), file.into(), line)
    }

    #[test]
    fn round_trip_through_prost() {
        let frames = vec![
            frame("main (app.py:3)", "main", "app.py", 3),
            frame("handle (app.py:9)", "handle", "app.py", 9),
            frame("handle (app.py:10)", "handle", "app.py", 10),
        ];
        let samples = vec![
            (
                "main (app.py:3);handle (app.py:9)".to_string(),
                vec![5],
                vec![("state".into(), "busy".into())],
            ),
            (
                "main (app.py:3);handle (app.py:10)".to_string(),
                vec![7],
                vec![("state".into(), "idle".into())],
            ),
        ];
        let mut raw = Vec::new();
        GzDecoder::new(&encode(&header(), &frames, &samples).unwrap()[..])
            .read_to_end(&mut raw)
            .unwrap();
        let profile = Profile::decode(&raw[..]).unwrap();
        assert_eq!(profile.string_table[0], "");
        assert_eq!(profile.function.len(), 2, "one function per (name, file)");
        assert_eq!(profile.location.len(), 3);
        assert_eq!(profile.sample[1].value, vec![7]);
        assert_eq!(profile.sample[1].location_id, vec![3, 1]);
        let label = &profile.sample[1].label[0];
        assert_eq!(profile.string_table[label.key as usize], "state");
        assert_eq!(profile.string_table[label.str as usize], "idle");
        let handle = &profile.location[2].line[0];
        assert_eq!(handle.line, 10);
        let function = &profile.function[(handle.function_id - 1) as usize];
        assert_eq!(profile.string_table[function.name as usize], "handle");
    }

    #[test]
    fn decode_reads_back_what_encode_wrote_and_refuses_corrupt_files() {
        let frames = vec![
            frame("main (app.py:3)", "main", "app.py", 3),
            frame("[idle]", "[idle]", "", 0),
        ];
        let samples = vec![(
            "main (app.py:3);[idle]".to_string(),
            vec![5],
            vec![("state".into(), "idle".into())],
        )];
        let data = encode(&header(), &frames, &samples).unwrap();
        let read = decode(&data, 1 << 20).unwrap();
        assert_eq!(read.sample_types, vec![("samples".into(), "count".into())]);
        assert_eq!(read.frames[read.samples[0].0[0] as usize].0, "main");
        assert_eq!(read.frames[read.samples[0].0[1] as usize].0, "[idle]");
        assert_eq!(read.samples[0].1, vec![5]);
        assert!(decode(&data[..data.len() / 2], 1 << 20).is_err());
        assert!(decode(&data, 8).unwrap_err().starts_with("refused"));
        let mut bad = Profile::decode(&build(&header(), &frames, &samples).unwrap()[..]).unwrap();
        bad.sample[0].location_id[0] = 99;
        assert!(decode(&bad.encode_to_vec(), 1 << 20)
            .unwrap_err()
            .contains("location 99"));
    }

    #[test]
    fn out_of_line_samples_are_refused() {
        let frames = vec![frame("main", "main", "", 0)];
        assert!(build(
            &header(),
            &frames,
            &[("main;other".into(), vec![1], vec![])]
        )
        .is_err());
        assert!(build(&header(), &frames, &[("main".into(), vec![1, 2], vec![])]).is_err());
    }

    #[test]
    fn push_request_decodes() {
        let body = push_request(vec![(
            vec![("__name__".into(), "wall".into())],
            vec![vec![1, 2, 3]],
        )]);
        let request = PushRequest::decode(&body[..]).unwrap();
        assert_eq!(request.series[0].labels[0].value, "wall");
        assert_eq!(request.series[0].samples[0].raw_profile, vec![1, 2, 3]);
    }
}
