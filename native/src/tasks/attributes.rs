//! An instance attribute read by name from the target's memory (CPython 3.11–3.15, default
//! GIL builds, 64-bit Linux), and typed readers of what it refers to: a str's text, a bytes
//! object's content, a float's value, a tuple's items.
//!
//! Where `get` looks, in the order Python's lookup finds an instance's own attribute:
//! - `__slots__` members, the type's `tp_members` and its bases' (`Types::member_offsets`):
//!   data descriptors, which win over the instance's dict. An unset slot is no attribute.
//! - A managed dict (`Py_TPFLAGS_MANAGED_DICT`, heap types only): the values are indexed by
//!   the name's entry in the type's shared keys, `((PyHeapTypeObject *)tp)->ht_cached_keys`,
//!   a `DICT_KEYS_SPLIT` keys object of `PyDictUnicodeEntry`s after its indices. It is found
//!   without a table: a heap type's `tp_as_async` points into the type itself
//!   (`&et->as_async`, `sizeof(PyTypeObject)` in: 408 bytes in 3.11, 416 in 3.12–3.14, 424 in
//!   3.15), and `ht_cached_keys` follows as_async, as_number, as_mapping, as_sequence,
//!   as_buffer, ht_name, ht_slots and ht_qualname, 464 bytes after it in all five (checked
//!   against each version's headers). The keys read must make sense (split kind, log2 sizes
//!   in range, entries within the usable fraction and CPython's 30 shared keys) before they
//!   are trusted. The values: 3.11 a pointer four words before the object (the dict's is three
//!   before); 3.12 one word three before, the values tagged with its low bit (pointer - 1),
//!   else the dict; 3.13+ inline after the object's `tp_basicsize` when the type has
//!   `Py_TPFLAGS_INLINE_VALUES` and the values' `valid` byte is set (capacity in their first
//!   byte), else the dict three words before. A materialized dict is looked up by name
//!   (`dict_get`).
//! - Otherwise a plain `__dict__` at a positive `tp_dictoffset`.
//!
//! It refuses (errors): dunder names (the members of heap types include C ones such as
//! `__dictoffset__`), a negative `tp_dictoffset` outside managed dicts (a dict after the
//! items of a variable-size object: 3.11's subclasses of tuple or int; 3.12+ manage them), a
//! managed dict in a static type, and anything read that does not check out. Class
//! attributes and properties are not instance attributes: None.
//! A C member of another type than an object (`T_INT`...) reads as an address the typed
//! readers then refuse (their type check). The typed readers check the object's type: a str
//! (or subclass) that is compact (ASCII, 1/2/4 bytes a character, at most 4096), bytes (or
//! subclass), an exact float, a tuple (or subclass) whose items are all set.

use std::collections::HashMap;

use anyhow::{bail, Result};
use rustc_hash::FxBuildHasher;

use super::objects::{
    c_string, dict_get, Kind, TypeInfo, Types, CELL_REF, FLOAT_VALUE, INLINE_VALUES, KEYS_INDICES,
    KEYS_KIND, KEYS_LOG2_INDEX_BYTES, KEYS_LOG2_SIZE, KEYS_NENTRIES, KEYS_USABLE, LIST_ITEMS,
    LIST_SIZE, MANAGED_DICT, TP_AS_ASYNC, TP_BASE, TP_BASICSIZE, TP_DICTOFFSET, TP_FLAGS,
    TP_MEMBERS, TP_NAME, TUPLE_SIZE,
};
use crate::process::memory::{read, usize_at};
use crate::walker::objects::{bytes, string};
use crate::walker::{tuple_items, Layout};

const TYPE_READ: usize = TP_DICTOFFSET + 8;
/// Where a heap type's `as_async` may lie in it (`sizeof(PyTypeObject)`: 408 to 424), and
/// its `ht_cached_keys` after that.
const TYPE_SIZES: std::ops::RangeInclusive<usize> = 400..=512;
const CACHED_KEYS_AFTER_AS_ASYNC: usize = 464;
/// Type flags, beside objects' managed-dict ones.
const HEAPTYPE: u64 = 1 << 9;
const LIST_SUBCLASS: u64 = 1 << 25;
pub(super) const TUPLE_SUBCLASS: u64 = 1 << 26;
const BYTES_SUBCLASS: u64 = 1 << 27;
const UNICODE_SUBCLASS: u64 = 1 << 28;
/// Before the object: 3.12+ the managed dict (or 3.12's tagged values), 3.11 its values.
const MANAGED_DICT_BEFORE: usize = 24;
const VALUES_BEFORE_311: usize = 32;
/// The kind of shared keys, and the size of one of their entries.
const KEYS_SPLIT: u8 = 2;
const ENTRY_SIZE: usize = 16;
/// Sanity bounds: CPython's `SHARED_KEYS_MAX_SIZE`, the types and names cached.
const MAX_SHARED: usize = 30;
const MAX_TYPES: usize = 4096;
const MAX_SLOT_NAMES: usize = 256;
const MAX_BASICSIZE: usize = 1 << 20;

/// What is known of a type, by its address: kept while the fields in `stamp` read the same
/// (a type freed and another made at its address differs in them).
#[derive(Default)]
struct TypeCache {
    /// `tp_name`, `tp_members`, `tp_base`, `tp_as_async`.
    stamp: [usize; 4],
    /// By name: the offset of the slot, or None when no member has it.
    slots: HashMap<String, Option<usize>, FxBuildHasher>,
    /// The shared keys as last read: their address, and each entry's key (address, text).
    keys: usize,
    names: Vec<(usize, String)>,
}

/// Reads instance attributes by name, caching per type where each name lies.
#[derive(Default)]
pub struct Attributes {
    types: Types,
    cache: HashMap<usize, TypeCache, FxBuildHasher>,
}

impl Attributes {
    /// The object an attribute of the instance at `object` refers to (its address), or None
    /// when the instance has no such attribute; errors for reads that fail or do not check
    /// out.
    pub fn get(
        &mut self,
        pid: i32,
        layout: &Layout,
        object: usize,
        name: &str,
    ) -> Result<Option<usize>> {
        if name.is_empty() || (name.starts_with("__") && name.ends_with("__")) {
            bail!("the attribute {name:?} is not read (a dunder name)");
        }
        let mut head = [0u8; 16];
        read(pid, checked(object)?, &mut head)?;
        let ty = checked(usize_at(&head, 8))?;
        let mut raw = [0u8; TYPE_READ];
        read(pid, ty, &mut raw)?;
        let field = |offset: usize| usize_at(&raw, offset);
        let stamp = [TP_NAME, TP_MEMBERS, TP_BASE, TP_AS_ASYNC].map(field);
        if self.cache.len() >= MAX_TYPES && !self.cache.contains_key(&ty) {
            self.cache.clear();
        }
        let cache = self.cache.entry(ty).or_default();
        if cache.stamp != stamp {
            *cache = TypeCache {
                stamp,
                ..TypeCache::default()
            };
        }
        let basicsize = field(TP_BASICSIZE);
        if !(16..=MAX_BASICSIZE).contains(&basicsize) {
            bail!("a type of instances of {basicsize} bytes: a torn read");
        }
        let slot = match cache.slots.get(name) {
            Some(&slot) => slot,
            None => {
                let [slot] = Types::member_offsets(pid, ty, [name])?;
                if cache.slots.len() >= MAX_SLOT_NAMES {
                    cache.slots.clear();
                }
                cache.slots.insert(name.to_string(), slot);
                slot
            }
        };
        if let Some(offset) = slot {
            if offset < 16 || offset + 8 > basicsize {
                bail!("a slot at {offset} of an object of {basicsize} bytes: a torn read");
            }
            return word(pid, object + offset);
        }
        let flags = field(TP_FLAGS) as u64;
        if flags & MANAGED_DICT != 0 {
            return self.managed(pid, layout, (object, ty, &raw), name);
        }
        match field(TP_DICTOFFSET) as isize {
            0 => Ok(None),
            offset if offset > 0 && offset as usize + 8 <= basicsize => {
                match word(pid, object + offset as usize)? {
                    Some(dict) => dict_get(pid, layout, &mut self.types, dict, name),
                    None => Ok(None),
                }
            }
            offset => bail!("a dict at offset {offset} of its object: not read"),
        }
    }

    /// `get` for an instance of a type with a managed dict, whose head is `raw`.
    fn managed(
        &mut self,
        pid: i32,
        layout: &Layout,
        (object, ty, raw): (usize, usize, &[u8]),
        name: &str,
    ) -> Result<Option<usize>> {
        let (flags, basicsize) = (usize_at(raw, TP_FLAGS) as u64, usize_at(raw, TP_BASICSIZE));
        if flags & HEAPTYPE == 0 {
            bail!("a managed dict in a static type: not read");
        }
        let before = |distance: usize| {
            object
                .checked_sub(distance)
                .ok_or_else(|| anyhow::anyhow!("an object at {object:#x}: a torn read"))
        };
        // (values, their capacity where known, dict)
        let (values, capacity, dict) = match layout.minor {
            11 => {
                let mut pre = [0u8; 16];
                read(pid, before(VALUES_BEFORE_311)?, &mut pre)?;
                (usize_at(&pre, 0), None, usize_at(&pre, 8))
            }
            12 => match word(pid, before(MANAGED_DICT_BEFORE)?)?.unwrap_or(0) {
                tagged if tagged & 1 == 1 => (tagged.wrapping_add(1), None, 0),
                dict => (0, None, dict),
            },
            _ => {
                let mut inline = [0u8; 8];
                if flags & INLINE_VALUES != 0 {
                    // 3.13 keeps them after the object's header only
                    if layout.minor == 13 && basicsize != 16 {
                        bail!("inline values after {basicsize} bytes in 3.13: a torn read");
                    }
                    read(pid, object + basicsize, &mut inline)?;
                }
                match inline[3] {
                    0 => (
                        0,
                        None,
                        word(pid, before(MANAGED_DICT_BEFORE)?)?.unwrap_or(0),
                    ),
                    _ => (object + basicsize + 8, Some(usize::from(inline[0])), 0),
                }
            }
        };
        if values == 0 {
            return match dict {
                0 => Ok(None),
                dict => dict_get(pid, layout, &mut self.types, checked(dict)?, name),
            };
        }
        let Some(index) = self.shared_index(pid, layout, ty, raw, name)? else {
            return Ok(None);
        };
        if capacity.is_some_and(|capacity| index >= capacity) {
            bail!("the key {index} of values for {capacity:?}: a torn read");
        }
        word(pid, checked(values)? + index * 8)
    }

    /// The index of `name` in the shared keys of the heap type at `ty` (whose head is `raw`),
    /// None when no instance of the type has set it yet.
    fn shared_index(
        &mut self,
        pid: i32,
        layout: &Layout,
        ty: usize,
        raw: &[u8],
        name: &str,
    ) -> Result<Option<usize>> {
        let as_async = usize_at(raw, TP_AS_ASYNC);
        let distance = as_async.wrapping_sub(ty);
        if !TYPE_SIZES.contains(&distance) || !distance.is_multiple_of(8) {
            bail!("a heap type whose tp_as_async is {distance:#x} bytes in: not read");
        }
        let keys = checked(word(pid, as_async + CACHED_KEYS_AFTER_AS_ASYNC)?.unwrap_or(0))?;
        let mut head = [0u8; KEYS_INDICES];
        read(pid, keys, &mut head)?;
        let (log2_size, log2_index) = (head[KEYS_LOG2_SIZE], head[KEYS_LOG2_INDEX_BYTES]);
        let entries = usize_at(&head, KEYS_NENTRIES);
        let usable = usize_at(&head, KEYS_USABLE);
        let fraction = ((1usize << log2_size.min(10)) << 1) / 3;
        if head[KEYS_KIND] != KEYS_SPLIT
            || !(3..=10).contains(&log2_size)
            || !(log2_size..=log2_size + 3).contains(&log2_index)
            || entries > fraction.min(MAX_SHARED)
            || usable > fraction
        {
            bail!("a type's shared keys that do not check out: a torn read");
        }
        let mut raw = vec![0u8; entries * ENTRY_SIZE];
        read(pid, keys + KEYS_INDICES + (1 << log2_index), &mut raw)?;
        let Some(cache) = self.cache.get_mut(&ty) else {
            bail!("a type read without its cache");
        };
        if cache.keys != keys {
            (cache.keys, cache.names) = (keys, Vec::new());
        }
        let mut names = std::mem::take(&mut cache.names);
        names.resize(entries.max(names.len()), (0, String::new()));
        let mut found = None;
        for (i, entry) in raw.chunks_exact(ENTRY_SIZE).enumerate() {
            let key = usize_at(entry, 0);
            if key == 0 {
                continue;
            }
            if names[i].0 != key {
                self.types.expect(pid, key, None, Kind::Str)?;
                names[i] = (key, string(pid, layout, key)?);
            }
            if names[i].1 == name {
                found = Some(i);
                break;
            }
        }
        if let Some(cache) = self.cache.get_mut(&ty) {
            cache.names = names;
        }
        Ok(found)
    }

    /// The text of the str at `at`, of at most `max_chars` characters (and 4096).
    pub fn text(
        &mut self,
        pid: i32,
        layout: &Layout,
        at: usize,
        max_chars: usize,
    ) -> Result<String> {
        let head = self.head(pid, at, layout.str_length + 8, UNICODE_SUBCLASS, "str")?;
        let length = usize_at(&head, layout.str_length);
        if length > max_chars {
            bail!("a str of {length} characters, more than the {max_chars} read");
        }
        string(pid, layout, at)
    }

    /// The content of the bytes object at `at`, of at most `max_bytes` bytes.
    pub fn bytes(
        &mut self,
        pid: i32,
        layout: &Layout,
        at: usize,
        max_bytes: usize,
    ) -> Result<Vec<u8>> {
        let head = self.head(pid, at, layout.bytes_size + 8, BYTES_SUBCLASS, "bytes")?;
        let size = usize_at(&head, layout.bytes_size);
        if size > max_bytes {
            bail!("a bytes object of {size} bytes, more than the {max_bytes} read");
        }
        bytes(pid, layout, at)
    }

    /// The value of the float at `at`.
    pub fn float(&mut self, pid: i32, at: usize) -> Result<f64> {
        let mut head = [0u8; FLOAT_VALUE + 8];
        read(pid, checked(at)?, &mut head)?;
        self.types.expect(pid, at, Some(&head), Kind::Float)?;
        Ok(f64::from_bits(usize_at(&head, FLOAT_VALUE) as u64))
    }

    /// The items of the tuple at `at` (their addresses), of at most `max_items`.
    pub fn tuple(
        &mut self,
        pid: i32,
        layout: &Layout,
        at: usize,
        max_items: usize,
    ) -> Result<Vec<usize>> {
        let head = self.head(pid, at, TUPLE_SIZE + 8, TUPLE_SUBCLASS, "tuple")?;
        let count = usize_at(&head, TUPLE_SIZE);
        if count > max_items {
            bail!("a tuple of {count} items, more than the {max_items} read");
        }
        let mut raw = vec![0u8; count * 8];
        read(pid, at + tuple_items(layout.minor), &mut raw)?;
        let items: Vec<usize> = raw.chunks_exact(8).map(|item| usize_at(item, 0)).collect();
        if items.iter().any(|&item| checked(item).is_err()) {
            bail!("a tuple with an item unset: a torn read");
        }
        Ok(items)
    }

    /// The items of the list at `at` (their addresses), of at most `max_items`.
    pub fn list(&mut self, pid: i32, at: usize, max_items: usize) -> Result<Vec<usize>> {
        let head = self.head(pid, at, LIST_ITEMS + 8, LIST_SUBCLASS, "list")?;
        let count = usize_at(&head, LIST_SIZE);
        if count > max_items {
            bail!("a list of {count} items, more than the {max_items} read");
        }
        let mut raw = vec![0u8; count * 8];
        if count > 0 {
            read(pid, checked(usize_at(&head, LIST_ITEMS))?, &mut raw)?;
        }
        let items: Vec<usize> = raw.chunks_exact(8).map(|item| usize_at(item, 0)).collect();
        if items.iter().any(|&item| checked(item).is_err()) {
            bail!("a list with an item unset: a torn read");
        }
        Ok(items)
    }

    /// The value under the str key `key` in the dict at `dict` (`objects::dict_get`).
    pub fn dict_item(
        &mut self,
        pid: i32,
        layout: &Layout,
        dict: usize,
        key: &str,
    ) -> Result<Option<usize>> {
        dict_get(pid, layout, &mut self.types, checked(dict)?, key)
    }

    /// The object the cell at `at` holds; an error for an empty cell.
    pub fn cell(&mut self, pid: i32, at: usize) -> Result<usize> {
        let mut head = [0u8; CELL_REF + 8];
        read(pid, checked(at)?, &mut head)?;
        self.types.expect(pid, at, Some(&head), Kind::Cell)?;
        checked(usize_at(&head, CELL_REF))
    }

    /// What the object at `at` is, as the task scan tells kinds (`Kind::None` for None).
    pub fn kind(&mut self, pid: i32, at: usize) -> Result<Kind> {
        Ok(self.type_info(pid, at)?.kind)
    }

    /// The type of the object at `at` as read once: its kind, instance size and flags.
    pub fn type_info(&mut self, pid: i32, at: usize) -> Result<TypeInfo> {
        self.types.of(pid, checked(at)?, None)
    }

    /// The address of the type of the object at `at`, and its name (`tp_name`).
    pub fn type_of(&mut self, pid: i32, at: usize) -> Result<(usize, String)> {
        let mut head = [0u8; 16];
        read(pid, checked(at)?, &mut head)?;
        let ty = checked(usize_at(&head, 8))?;
        let mut name = [0u8; 8];
        read(pid, ty + TP_NAME, &mut name)?;
        Ok((ty, c_string(pid, usize_at(&name, 0))?))
    }

    /// The first `size` bytes of the object at `at`, whose type must have the flag `flag`.
    fn head(&mut self, pid: i32, at: usize, size: usize, flag: u64, what: &str) -> Result<Vec<u8>> {
        let mut head = vec![0u8; size.max(16)];
        read(pid, checked(at)?, &mut head)?;
        if self.types.of(pid, at, Some(&head))?.flags & flag == 0 {
            bail!("not a {what}: a torn read");
        }
        Ok(head)
    }
}

/// `address` when it may be an object's: aligned, past the first page, in user space.
fn checked(address: usize) -> Result<usize> {
    if !(1 << 12..1 << 57).contains(&address) || !address.is_multiple_of(8) {
        bail!("not an object's address ({address:#x}): a torn read");
    }
    Ok(address)
}

/// The pointer at `at`; None when null.
fn word(pid: i32, at: usize) -> Result<Option<usize>> {
    let mut raw = [0u8; 8];
    read(pid, at, &mut raw)?;
    Ok(Some(usize_at(&raw, 0)).filter(|&w| w != 0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead, BufReader};
    use std::path::PathBuf;
    use std::process::{Child, Command, Stdio};

    /// Builds the objects read, prints their ids (one line) and sleeps.
    const SCRIPT: &str = r#"
import sys, time, types
class Request:
    def __init__(self):
        self.method = "GET"
        self.path = "/users/42"
        self.elapsed = 0.25
        self.parts = ("users", "42")
        self.body = b"id=42"
class Routed(Request):
    def __init__(self):
        super().__init__()
        self.route = "/users/{id}"
class Slotted:
    __slots__ = ("method", "elapsed", "unset")
    def __init__(self):
        self.method = "PUT"
        self.elapsed = 1.5
class Loose(Slotted):
    pass
plain, sub, slotted, loose = Request(), Routed(), Slotted(), Loose()
loose.trace = "abc123"
# more names than the 30 shared keys: its dict materializes
grown = Request()
for i in range(40):
    setattr(grown, "extra%d" % i, "x%d" % i)
del plain.body
viewed = Request()
viewed.__dict__["trace"] = "t-\u00e9\u4e2d"
ns = types.SimpleNamespace(method="HEAD", parts=("a", "b", "c"))
class Pair(tuple):
    pass
pair = Pair(("a", "b"))
pair.label = "x"
objects = [plain, sub, slotted, loose, grown, viewed, ns, pair]
print(" ".join(str(id(o)) for o in objects), flush=True)
time.sleep(120)
"#;

    /// A child killed and reaped on every path.
    struct Target(Child);
    impl Drop for Target {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    /// The interpreter of 3.`minor` as tests/support/pythons.py finds it: pyenv's newest
    /// patch release, or Debian's unpacked one.
    fn interpreter(minor: u64) -> Option<PathBuf> {
        let home = std::env::var("HOME").unwrap_or_default();
        let pyenv = std::env::var("PYENV_ROOT").unwrap_or(format!("{home}/.pyenv"));
        let version = format!("3.{minor}");
        let newest = std::fs::read_dir(format!("{pyenv}/versions"))
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|entry| {
                let name = entry.file_name().into_string().ok()?;
                let patch: u32 = name.strip_prefix(&format!("{version}."))?.parse().ok()?;
                let python = entry.path().join(format!("bin/python{version}"));
                python.is_file().then_some((patch, python))
            })
            .max();
        let cache = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.cache/pythons");
        let debian = cache.join(format!("{version}/root/usr/bin/python{version}-patched"));
        let ready = cache.join(format!("{version}/ready")).is_file() && debian.is_file();
        newest.map(|(_, python)| python).or(ready.then_some(debian))
    }

    fn check(minor: u64, python: PathBuf) {
        let mut child = Command::new(&python)
            .args(["-I", "-c", SCRIPT])
            .stdout(Stdio::piped())
            .spawn()
            .expect("the interpreter starts");
        let stdout = child.stdout.take().expect("its stdout");
        let target = Target(child);
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).expect("reads");
        let ids: Vec<usize> = line
            .split_whitespace()
            .map(|id| id.parse().unwrap())
            .collect();
        let [plain, sub, slotted, loose, grown, viewed, ns, pair] = ids[..] else {
            panic!("3.{minor}: the script printed {line:?}");
        };
        let pid = target.0.id() as i32;
        let config = py_spy::Config {
            blocking: py_spy::config::LockingStrategy::NonBlocking,
            ..py_spy::Config::default()
        };
        let spy = crate::process::attach::attach_spy(pid, &config).expect("py-spy attaches");
        let layout = crate::walker::layout_of(&spy).expect("a layout");
        assert_eq!(layout.minor, minor);
        let mut at = Attributes::default();
        let mut get = |object: usize, name: &str| {
            at.get(pid, &layout, object, name)
                .unwrap_or_else(|e| panic!("3.{minor}: {name}: {e:#}"))
        };
        let found: Vec<_> = [
            (plain, "method"),
            (plain, "path"),
            (plain, "elapsed"),
            (plain, "parts"),
            (sub, "route"),
            (sub, "path"),
            (slotted, "method"),
            (slotted, "elapsed"),
            (loose, "method"),
            (loose, "trace"),
            (grown, "path"),
            (grown, "extra39"),
            (viewed, "method"),
            (viewed, "trace"),
            (ns, "method"),
            (ns, "parts"),
        ]
        .iter()
        .map(|&(object, name)| get(object, name).unwrap_or_else(|| panic!("3.{minor}: {name}")))
        .collect();
        for (object, name) in [
            (plain, "body"),
            (plain, "route"),
            (slotted, "unset"),
            (loose, "nothing"),
            (grown, "route"),
            (ns, "path"),
        ] {
            assert_eq!(get(object, name), None, "3.{minor}: {name}");
        }
        let mut text = |object| at.text(pid, &layout, object, 64).expect("a str");
        let texts: Vec<String> = [0, 1, 4, 5, 6, 8, 9, 10, 11, 12, 13, 14]
            .iter()
            .map(|&i| text(found[i]))
            .collect();
        assert_eq!(
            texts,
            [
                "GET",
                "/users/42",
                "/users/{id}",
                "/users/42",
                "PUT",
                "PUT",
                "abc123",
                "/users/42",
                "x39",
                "GET",
                "t-\u{e9}\u{4e2d}",
                "HEAD"
            ],
            "3.{minor}"
        );
        assert_eq!(at.float(pid, found[2]).expect("a float"), 0.25);
        assert_eq!(at.float(pid, found[7]).expect("a float"), 1.5);
        for (tuple, want) in [
            (found[3], vec!["users", "42"]),
            (found[15], vec!["a", "b", "c"]),
        ] {
            let items = at.tuple(pid, &layout, tuple, 8).expect("a tuple");
            let items: Vec<String> = items
                .iter()
                .map(|&item| at.text(pid, &layout, item, 64).expect("a str"))
                .collect();
            assert_eq!(items, want, "3.{minor}");
        }
        // the typed readers refuse other types and what is over their bounds
        assert!(at.float(pid, found[0]).is_err());
        assert!(at.text(pid, &layout, found[2], 64).is_err());
        assert!(at.text(pid, &layout, found[1], 4).is_err());
        assert!(at.tuple(pid, &layout, found[15], 2).is_err());
        assert!(at.get(pid, &layout, plain, "__dict__").is_err());
        let body = at
            .get(pid, &layout, sub, "body")
            .expect("reads")
            .expect("a body");
        assert_eq!(at.bytes(pid, &layout, body, 16).expect("bytes"), b"id=42");
        assert!(at.bytes(pid, &layout, body, 4).is_err());
        // a dict after a tuple's items: 3.11's negative tp_dictoffset is refused, 3.12+
        // manage it
        let label = at.get(pid, &layout, pair, "label");
        match minor {
            11 => assert!(label.is_err(), "3.11: {label:?}"),
            _ => {
                let label = label.expect("reads").expect("a label");
                assert_eq!(at.text(pid, &layout, label, 8).expect("a str"), "x");
            }
        }
        drop(target);
    }

    #[test]
    fn attributes_read_by_name_in_every_version() {
        let ci = std::env::var("CI").is_ok_and(|ci| ci.eq_ignore_ascii_case("true"));
        let mut read = 0;
        for minor in crate::walker::MINORS {
            match interpreter(minor) {
                Some(python) => {
                    check(minor, python);
                    read += 1;
                }
                None if ci => panic!("no Python 3.{minor} in CI"),
                None => eprintln!("no Python 3.{minor} on this machine: skipped"),
            }
        }
        assert!(read > 0 || !ci);
    }
}
