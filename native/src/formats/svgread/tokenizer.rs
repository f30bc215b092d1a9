//! The document tokenized by quick-xml and each event checked (`xml`'s rules): one root
//! element, tags matched, nothing outside the root but white space, comments and processing
//! instructions, a DOCTYPE only before the root, references resolved or refused, nesting no
//! deeper than the caller allows. Along the way each frame is paired as the test oracle pairs
//! it (a `<g>`, its `<title>`, its `<rect>`), and the scripts' text, the frames container's
//! `total_samples` and the text of the first `<metadata id="sidecar-folded">` (the folded stacks
//! sidecar embeds in the SVGs it writes) are kept.

use std::borrow::Cow;

use quick_xml::events::{BytesStart, Event};
use quick_xml::Reader;

use super::xml::{
    attribute, attributes, declaration_ok, decoded, doctype_ok, is_name, is_space, push_text,
    resolve, unknown_reference,
};
use super::{place, RawFrame, Scan, RECT_ATTRIBUTES};

pub(super) struct Scanner<'a> {
    doc: &'a [u8],
    reader: Reader<&'a [u8]>,
    max_depth: usize,
    open: Vec<&'a [u8]>,
    root: Option<&'a [u8]>,
}

/// Where a frame is being read, as the oracle pairs a `<g>`, its `<title>` and its `<rect>`.
#[derive(Default)]
struct Pairing {
    in_group: bool,
    title: Option<String>,
    in_script: bool,
    /// Inside the embedded stacks' element: the depth of the elements open around it.
    in_embedded: Option<usize>,
}

/// The `id` of the element whose text is the folded stacks sidecar embeds in its SVGs.
pub const EMBEDDED_ID: &[u8] = b"sidecar-folded";

impl<'a> Scanner<'a> {
    pub(super) fn new(doc: &'a [u8], max_depth: usize) -> Self {
        let mut reader = Reader::from_reader(doc);
        let config = reader.config_mut();
        config.check_end_names = false; // checked here, against the open elements
        config.check_comments = true;
        config.allow_dangling_amp = false;
        config.allow_unmatched_ends = false;
        config.expand_empty_elements = false;
        config.trim_text(false);
        Scanner {
            doc,
            reader,
            max_depth,
            open: Vec::with_capacity(16),
            root: None,
        }
    }

    pub(super) fn scan(mut self) -> Result<Scan<'a>, String> {
        let mut scan = Scan {
            root: String::new(),
            frames: Vec::new(),
            total_samples: None,
            script: String::new(),
            embedded: None,
            folded: None,
        };
        let mut pairing = Pairing::default();
        let mut frames_container = false;
        let mut doctype_allowed = true;
        let mut attrs: Vec<(&[u8], &[u8])> = Vec::with_capacity(8);
        let mut scratch = String::new();
        let mut first = true;
        loop {
            let position = self.reader.buffer_position() as usize;
            let event = match self.reader.read_event() {
                Ok(event) => event,
                Err(err) => {
                    let at = self.reader.error_position() as usize;
                    return Err(format!(
                        "not well-formed XML at {}: {err}",
                        place(self.doc, at)
                    ));
                }
            };
            let wrong = |what: &str| {
                format!(
                    "not well-formed XML at {}: {what}",
                    place(self.doc, position)
                )
            };
            let is_first = std::mem::replace(&mut first, false);
            let empty = matches!(event, Event::Empty(_));
            let inside = !self.open.is_empty();
            match event {
                Event::Decl(decl) => {
                    if !is_first || position != 0 {
                        return Err(wrong("an XML declaration after the start"));
                    }
                    if !declaration_ok(&decl) {
                        return Err(wrong(
                            "the XML declaration is not version 1.x in UTF-8 (only UTF-8 is read)",
                        ));
                    }
                }
                Event::PI(pi) => {
                    let end = pi.iter().position(|&b| is_space(b)).unwrap_or(pi.len());
                    let target = &pi[..end];
                    if target.eq_ignore_ascii_case(b"xml") {
                        return Err(wrong("an XML declaration after the start"));
                    }
                    if !is_name(target) {
                        return Err(wrong("a processing instruction without a target name"));
                    }
                }
                Event::DocType(doctype) => {
                    if !doctype_allowed || self.root.is_some() {
                        return Err(wrong("a DOCTYPE not before the root element, or twice"));
                    }
                    if doctype.contains(&b'[') {
                        return Err(format!(
                            "refused: the DOCTYPE at {} has declarations; entity declarations \
                             are not accepted",
                            place(self.doc, position)
                        ));
                    }
                    if !doctype_ok(&doctype) {
                        return Err(wrong("a DOCTYPE that is not a name and an external ID"));
                    }
                    doctype_allowed = false;
                }
                Event::Comment(_) => {}
                Event::CData(text) => {
                    if !inside {
                        return Err(wrong("CDATA outside the root element"));
                    }
                    if let Some(out) = pairing.text_out(&mut scan.script, &mut scan.embedded) {
                        push_text(&text, out).map_err(|e| wrong(&e))?;
                    }
                }
                Event::Text(text) => {
                    if !inside {
                        if !text.iter().all(|&b| is_space(b)) {
                            return Err(wrong("text outside the root element"));
                        }
                        continue;
                    }
                    if text.windows(3).any(|w| w == b"]]>") {
                        return Err(wrong("']]>' in text"));
                    }
                    if let Some(out) = pairing.text_out(&mut scan.script, &mut scan.embedded) {
                        push_text(&text, out).map_err(|e| wrong(&e))?;
                    }
                }
                Event::GeneralRef(reference) => {
                    if !inside {
                        return Err(wrong("a reference outside the root element"));
                    }
                    let ch = resolve(&reference).ok_or_else(|| {
                        format!(
                            "refused at {}: {}",
                            place(self.doc, position),
                            unknown_reference(&reference)
                        )
                    })?;
                    if let Some(out) = pairing.text_out(&mut scan.script, &mut scan.embedded) {
                        out.push(ch);
                    }
                }
                Event::Start(element) | Event::Empty(element) => {
                    let name = self
                        .open_element(position, &element, &mut attrs, &mut scratch)
                        .map_err(|e| wrong(&e))?;
                    if self.open.len() + 1 > self.max_depth {
                        return Err(format!(
                            "refused: elements nest deeper than {} (at {}); flamegraph SVGs \
                             are shallow",
                            self.max_depth,
                            place(self.doc, position)
                        ));
                    }
                    match name {
                        b"rect" => {
                            if let Some(title) = pairing.title.take() {
                                let rect = RECT_ATTRIBUTES.map(|n| decoded(&attrs, n));
                                scan.frames.push(RawFrame { title, rect });
                                pairing.in_group = false;
                            }
                        }
                        b"g" if pairing.in_embedded.is_none() => {
                            pairing = Pairing {
                                in_group: true,
                                ..Pairing::default()
                            }
                        }
                        b"metadata"
                            if scan.embedded.is_none()
                                && attribute(&attrs, b"id") == Some(EMBEDDED_ID) =>
                        {
                            pairing = Pairing {
                                in_embedded: (!empty).then_some(self.open.len()),
                                ..Pairing::default()
                            };
                            scan.embedded = Some(String::new());
                        }
                        b"title" => {
                            pairing.title = pairing.in_group.then(String::new);
                            pairing.in_script = false;
                        }
                        b"script" => {
                            pairing.title = None;
                            pairing.in_script = true;
                        }
                        b"svg"
                            if !frames_container && attribute(&attrs, b"id") == Some(b"frames") =>
                        {
                            frames_container = true;
                            scan.total_samples =
                                decoded(&attrs, b"total_samples").map(Cow::into_owned);
                        }
                        _ => {}
                    }
                    if self.root.is_none() {
                        self.root = Some(name);
                        scan.root = String::from_utf8_lossy(name).into_owned();
                    }
                    if !empty {
                        self.open.push(name);
                    }
                }
                Event::End(element) => {
                    let Some(name) = self.open.pop() else {
                        return Err(wrong("an end tag that closes nothing"));
                    };
                    if pairing.in_embedded == Some(self.open.len()) {
                        pairing.in_embedded = None;
                    }
                    if element.name().as_ref() != name {
                        return Err(wrong(&format!(
                            "</{}> closes <{}>",
                            String::from_utf8_lossy(element.name().as_ref()),
                            String::from_utf8_lossy(name)
                        )));
                    }
                }
                Event::Eof => break,
            }
        }
        if let Some(name) = self.open.last() {
            return Err(format!(
                "not well-formed XML at {}: the document ends inside <{}>",
                place(self.doc, self.doc.len()),
                String::from_utf8_lossy(name)
            ));
        }
        if self.root.is_none() {
            return Err(format!(
                "not well-formed XML at {}: no element",
                place(self.doc, self.doc.len())
            ));
        }
        Ok(scan)
    }

    /// The name and attributes of an element that opens (or is empty), checked: one root,
    /// nothing after it.
    fn open_element(
        &mut self,
        position: usize,
        element: &BytesStart<'_>,
        attrs: &mut Vec<(&'a [u8], &'a [u8])>,
        scratch: &mut String,
    ) -> Result<&'a [u8], String> {
        // The tag as a slice of the document (what follows its '<'), to keep its parts.
        let tag: &'a [u8] = self
            .doc
            .get(position + 1..position + 1 + element.len())
            .filter(|tag| std::ptr::eq(tag.as_ptr(), element.as_ptr()))
            .ok_or("a tag the tokenizer did not place")?;
        let (name, rest) = tag.split_at(element.name().as_ref().len());
        if !is_name(name) {
            return Err(format!(
                "{:?} is not an element name",
                String::from_utf8_lossy(name)
            ));
        }
        attributes(rest, attrs, scratch)?;
        if self.open.is_empty() && self.root.is_some() {
            return Err("an element after the root element".to_owned());
        }
        Ok(name)
    }
}

impl Pairing {
    /// Where character data goes: the embedded stacks, a frame's title, the scripts, or
    /// nowhere.
    fn text_out<'s>(
        &'s mut self,
        script: &'s mut String,
        embedded: &'s mut Option<String>,
    ) -> Option<&'s mut String> {
        if self.in_embedded.is_some() {
            return embedded.as_mut();
        }
        match self.title.as_mut() {
            Some(title) => Some(title),
            None => self.in_script.then_some(script),
        }
    }
}
