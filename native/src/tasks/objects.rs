//! Python objects in the target's memory as the task scan meets them: each object's type,
//! told by the type's name (and its bases), checked before a field is trusted; dicts looked up
//! by string key; the members of sets; names of tasks. Every size and count is bounded.

use std::collections::HashMap;

use anyhow::{bail, Result};

use crate::process::memory::{read, read_upto, u32_at, usize_at, Batch};
use crate::walker::objects::string;
use crate::walker::Layout;
use rustc_hash::FxBuildHasher as FxBuild;

/// Pieces closer than this are read as one (see `Batch::read_merged`): objects of the same
/// pool then cost one remote piece.
pub const MERGE_GAP: usize = 1024;
/// Sanity bounds against torn or garbage reads.
const MAX_DICT_ENTRIES: usize = 1 << 17;
const MAX_SET_SLOTS: usize = 1 << 22;
const MAX_BASES: usize = 16;
const TYPE_CACHE: usize = 4096;

/// `PyTypeObject`: its name, its size, its `as_async`, its flags, its members, its base and
/// its dict's offset, the same in every version read; `PyMemberDef`: its size, its name (at 0)
/// and offset.
pub(super) const TP_NAME: usize = 24;
pub(super) const TP_BASICSIZE: usize = 32;
pub(super) const TP_AS_ASYNC: usize = 80;
pub(super) const TP_FLAGS: usize = 168;
const TP_ITERNEXT: usize = 224;
pub(super) const TP_MEMBERS: usize = 240;
pub(super) const TP_BASE: usize = 256;
pub(super) const TP_DICTOFFSET: usize = 288;
const TYPE_READ: usize = TP_BASE + 8;
/// Type flags (3.11+): instances keep their attributes where the type's shared keys say
/// (`Py_TPFLAGS_MANAGED_DICT`), 3.13+ inline after the object (`Py_TPFLAGS_INLINE_VALUES`).
pub(super) const INLINE_VALUES: u64 = 1 << 2;
pub(super) const MANAGED_DICT: u64 = 1 << 4;
const MEMBER_SIZE: usize = 40;
const MEMBER_OFFSET: usize = 16;
const MAX_MEMBERS: usize = 64;

/// Where objects keep what the scan reads of them, the same in every version read: a
/// `FutureObj`'s loop and first done callback, a `PyListObject`'s size and items, a tuple's
/// size, a float's value, a bound method's `__self__` (a Python method's or a built-in one's),
/// a function's closure and a cell's object.
pub const FUT_LOOP: usize = 16;
pub const FUT_CALLBACK0: usize = 24;
pub const LIST_SIZE: usize = 16;
pub const LIST_ITEMS: usize = 24;
pub const TUPLE_SIZE: usize = 16;
pub const FLOAT_VALUE: usize = 16;
pub const METHOD_SELF: usize = 24;
pub const FUNC_CLOSURE: usize = 72;
pub const CELL_REF: usize = 16;
/// A `collections.deque`'s length, its first and last blocks and the indices of its first and
/// last items in them; a block's items, and its link to the next block (CPython's
/// `dequeobject` and `block`, the same in every version read).
pub const DEQUE_SIZE: usize = 16;
pub const DEQUE_LEFT_BLOCK: usize = 24;
pub const DEQUE_RIGHT_BLOCK: usize = 32;
pub const DEQUE_LEFT_INDEX: usize = 40;
pub const DEQUE_RIGHT_INDEX: usize = 48;
pub const DEQUE_HEAD: usize = DEQUE_RIGHT_INDEX + 8;
pub const BLOCK_ITEMS: usize = 64;
pub const BLOCK_DATA: usize = 8;
pub const BLOCK_NEXT: usize = BLOCK_DATA + BLOCK_ITEMS * 8;

/// What an object is, as far as the task scan cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Task,
    Future,
    FutureIter,
    Coroutine,
    Generator,
    Str,
    Int,
    Dict,
    Set,
    List,
    Module,
    Method,
    Builtin,
    TaskGroup,
    Function,
    Tuple,
    Cell,
    Runner,
    TimerHandle,
    Deque,
    Float,
    WeakRef,
    WeakSet,
    None,
    Other,
}

/// A type as read once: its kind, instance size and flags.
#[derive(Debug, Clone, Copy)]
pub struct TypeInfo {
    pub kind: Kind,
    pub basicsize: usize,
    pub flags: u64,
    /// asyncio's `_GatheringFuture`, the future `gather` returns (a Future).
    pub gathering: bool,
    /// Its instances are iterators (`tp_iternext`), as all that an `await` waits in are.
    pub iterator: bool,
}

/// The kinds of the types met so far, by address.
#[derive(Default)]
pub struct Types {
    known: HashMap<usize, TypeInfo, FxBuild>,
    /// The types met last, the latest first: a scan reads the objects of each task in turn,
    /// mostly of a few types (a task, its coroutines, the future it waits on).
    recent: [Option<(usize, TypeInfo)>; RECENT_TYPES],
}

const RECENT_TYPES: usize = 4;

impl Types {
    /// The type of the object at `address`, whose first 16 bytes are `head` (or read now).
    pub fn of(&mut self, pid: i32, address: usize, head: Option<&[u8]>) -> Result<TypeInfo> {
        let ty = match head {
            Some(head) => usize_at(head, 8),
            None => {
                let mut word = [0u8; 8];
                read(pid, address + 8, &mut word)?;
                usize_at(&word, 0)
            }
        };
        self.info(pid, ty)
    }

    /// The type at `ty`, read once: its name and those of its bases tell its kind.
    pub fn info(&mut self, pid: i32, ty: usize) -> Result<TypeInfo> {
        if let Some((_, info)) = self.recent.iter().flatten().find(|(t, _)| *t == ty) {
            return Ok(*info);
        }
        if let Some(&info) = self.known.get(&ty) {
            self.recent.rotate_right(1);
            self.recent[0] = Some((ty, info));
            return Ok(info);
        }
        if ty == 0 || !ty.is_multiple_of(8) {
            bail!("an object without a type: a torn read");
        }
        let mut raw = vec![0u8; TYPE_READ];
        read(pid, ty, &mut raw)?;
        let basicsize = usize_at(&raw, TP_BASICSIZE);
        let flags = usize_at(&raw, TP_FLAGS) as u64;
        let name = type_name(pid, usize_at(&raw, TP_NAME))?;
        let gathering = name == "_GatheringFuture";
        let mut kind = kind_of(&name);
        // a subclass of Task or Future (say asyncio's _GatheringFuture) is one
        let mut base = usize_at(&raw, TP_BASE);
        for _ in 0..MAX_BASES {
            if kind != Kind::Other || base == 0 {
                break;
            }
            let mut fields = [0u8; 8];
            read(pid, base + TP_NAME, &mut fields)?;
            kind = match kind_of(&type_name(pid, usize_at(&fields, 0))?) {
                k @ (Kind::Task | Kind::Future) => k,
                _ => Kind::Other,
            };
            read(pid, base + TP_BASE, &mut fields)?;
            base = usize_at(&fields, 0);
        }
        let info = TypeInfo {
            kind,
            basicsize,
            flags,
            gathering,
            iterator: usize_at(&raw, TP_ITERNEXT) != 0,
        };
        if self.known.len() > TYPE_CACHE {
            self.known.clear();
        }
        self.known.insert(ty, info);
        Ok(info)
    }

    /// The offsets of the members (slots) named `names` among those of the type at `ty` and of
    /// its bases, the nearest first; None for a name none of them has.
    pub fn member_offsets<const N: usize>(
        pid: i32,
        ty: usize,
        names: [&str; N],
    ) -> Result<[Option<usize>; N]> {
        let mut offsets = [None; N];
        let mut ty = ty;
        for _ in 0..MAX_BASES {
            if ty == 0 {
                break;
            }
            let mut raw = [0u8; TYPE_READ];
            read(pid, ty, &mut raw)?;
            let members = usize_at(&raw, TP_MEMBERS);
            if members != 0 {
                let mut defs = vec![0u8; MAX_MEMBERS * MEMBER_SIZE];
                let defs = match read(pid, members, &mut defs) {
                    Ok(()) => defs,
                    Err(_) => read_upto(pid, members, MAX_MEMBERS * MEMBER_SIZE),
                };
                for def in defs.chunks_exact(MEMBER_SIZE) {
                    let name = usize_at(def, 0);
                    if name == 0 {
                        break;
                    }
                    let member = c_string(pid, name)?;
                    if let Some(i) = names.iter().position(|&n| n == member) {
                        offsets[i].get_or_insert(usize_at(def, MEMBER_OFFSET));
                    }
                }
            }
            ty = usize_at(&raw, TP_BASE);
        }
        Ok(offsets)
    }

    /// Fails unless the object at `address` is of kind `kind`; its type is taken from
    /// `head`, the object's bytes as read, when given (the check and the fields it guards
    /// from one read), else read.
    pub fn expect(
        &mut self,
        pid: i32,
        address: usize,
        head: Option<&[u8]>,
        kind: Kind,
    ) -> Result<TypeInfo> {
        let info = self.of(pid, address, head)?;
        if info.kind != kind {
            bail!("expected a {kind:?}, found a {:?}: a torn read", info.kind);
        }
        Ok(info)
    }
}

fn type_name(pid: i32, address: usize) -> Result<String> {
    if address == 0 {
        bail!("a type without a name: a torn read");
    }
    c_string(pid, address)
}

/// The NUL-terminated string at `address` (a type's or a member's name), up to 64 bytes.
pub fn c_string(pid: i32, address: usize) -> Result<String> {
    if address == 0 {
        bail!("a name without its text: a torn read");
    }
    let raw = read_upto(pid, address, 64);
    let end = raw.iter().position(|&b| b == 0).unwrap_or(raw.len());
    Ok(String::from_utf8_lossy(&raw[..end]).into_owned())
}

fn kind_of(name: &str) -> Kind {
    match name {
        "_asyncio.Task" => Kind::Task,
        "_asyncio.Future" => Kind::Future,
        "_asyncio.FutureIter" => Kind::FutureIter,
        "coroutine" => Kind::Coroutine,
        "generator" => Kind::Generator,
        "str" => Kind::Str,
        "int" => Kind::Int,
        "dict" => Kind::Dict,
        "set" => Kind::Set,
        "list" => Kind::List,
        "method" => Kind::Method,
        "builtin_function_or_method" => Kind::Builtin,
        "function" => Kind::Function,
        "tuple" => Kind::Tuple,
        "cell" => Kind::Cell,
        "Runner" => Kind::Runner,
        "TimerHandle" => Kind::TimerHandle,
        "collections.deque" => Kind::Deque,
        "float" => Kind::Float,
        "TaskGroup" => Kind::TaskGroup,
        "module" => Kind::Module,
        "weakref.ReferenceType" | "weakref" => Kind::WeakRef,
        "WeakSet" => Kind::WeakSet,
        "NoneType" => Kind::None,
        _ => Kind::Other,
    }
}

/// `PyDictObject`'s keys, and the parts of `PyDictKeysObject` (3.11–3.15 alike).
const DICT_KEYS: usize = 32;
const DICT_VALUES: usize = 40;
pub(super) const KEYS_LOG2_SIZE: usize = 8;
pub(super) const KEYS_LOG2_INDEX_BYTES: usize = 9;
pub(super) const KEYS_KIND: usize = 10;
pub(super) const KEYS_USABLE: usize = 16;
pub(super) const KEYS_NENTRIES: usize = 24;
pub(super) const KEYS_INDICES: usize = 32;

/// The value under the string key `wanted` in the dict at `dict` (a combined table, as module
/// and `sys.modules` dicts are, or a split one, as an instance's may be); None when it is not
/// there.
pub fn dict_get(
    pid: i32,
    layout: &Layout,
    types: &mut Types,
    dict: usize,
    wanted: &str,
) -> Result<Option<usize>> {
    let mut head = [0u8; 48];
    read(pid, dict, &mut head)?;
    types.expect(pid, dict, Some(&head), Kind::Dict)?;
    let keys = usize_at(&head, DICT_KEYS);
    let split = usize_at(&head, DICT_VALUES);
    if keys == 0 {
        bail!("a dict without keys: a torn read");
    }
    let mut kh = [0u8; 32];
    read(pid, keys, &mut kh)?;
    let index_bytes = 1usize << kh[KEYS_LOG2_INDEX_BYTES].min(40);
    let unicode = kh[KEYS_KIND] != 0;
    let entries = usize_at(&kh, KEYS_NENTRIES);
    if entries > MAX_DICT_ENTRIES || index_bytes > MAX_DICT_ENTRIES * 8 {
        bail!("a dict of {entries} entries: a torn read");
    }
    let size = if unicode { 16 } else { 24 };
    let mut raw = vec![0u8; entries * size];
    read(pid, keys + KEYS_INDICES + index_bytes, &mut raw)?;
    // a split table (an instance's dict of its type's shared keys) keeps its values apart,
    // in the order of the keys' entries (after a word of sizes and flags from 3.13)
    let mut values = Vec::new();
    if split != 0 {
        values = vec![0u8; entries * 8];
        read(
            pid,
            split + if layout.minor >= 13 { 8 } else { 0 },
            &mut values,
        )?;
    }
    for (i, entry) in raw.chunks_exact(size).enumerate() {
        let (key, mut value) = if unicode {
            (usize_at(entry, 0), usize_at(entry, 8))
        } else {
            (usize_at(entry, 8), usize_at(entry, 16))
        };
        if split != 0 {
            value = usize_at(&values, i * 8);
        }
        if key == 0 || value == 0 {
            continue;
        }
        if let Ok(text) = string(pid, layout, key) {
            if text == wanted {
                return Ok(Some(value));
            }
        }
    }
    Ok(None)
}

/// `PySetObject`: its mask and table, the same in every version read.
const SET_MASK: usize = 32;
const SET_TABLE: usize = 40;
/// The bytes of a set's header read: through its table pointer.
const SET_HEAD: usize = 48;

/// A set's table as the last read found it: (set, table, slots).
pub type SetTable = (usize, usize, usize);

/// The members of each of the sets at `sets` with the hash each was stored under (a removed
/// member's slot keeps a dummy key with the hash -1, which no object's hash is). Each set's
/// header and its table where `tables` says the last read found it are read in one call: a
/// set moves its table only as it grows or shrinks, and a table that moved is read again on
/// its own. `tables` is left as this read found them.
pub fn sets_entries(
    pid: i32,
    types: &mut Types,
    sets: &[usize],
    tables: &mut Vec<SetTable>,
    limit: usize,
) -> Result<Vec<Vec<(usize, usize)>>> {
    tables.retain(|t| sets.contains(&t.0));
    // by set, the table the last scan found (looked up before `tables` is updated below)
    let last: Vec<Option<SetTable>> = sets
        .iter()
        .map(|&set| tables.iter().find(|t| t.0 == set).copied())
        .collect();
    let mut pieces: Vec<(usize, usize)> = Vec::with_capacity(sets.len() * 2);
    for (&set, last) in sets.iter().zip(&last) {
        pieces.push((set, SET_HEAD));
        if let Some((_, table, slots)) = *last {
            pieces.push((table, slots * 16));
        }
    }
    let batch = Batch::read(pid, &pieces);
    let mut out = Vec::with_capacity(sets.len());
    for (&set, &last) in sets.iter().zip(&last) {
        let Some(head) = batch.get(set, SET_HEAD) else {
            bail!("cannot read the set at {set:#x}");
        };
        types.expect(pid, set, Some(head), Kind::Set)?;
        let slots = usize_at(head, SET_MASK).wrapping_add(1);
        let table = usize_at(head, SET_TABLE);
        if !slots.is_power_of_two() || slots > MAX_SET_SLOTS || table == 0 {
            bail!("a set of {slots} slots: a torn read");
        }
        let mut fresh = Vec::new();
        let raw = match batch.get(table, slots * 16) {
            Some(raw) if last == Some((set, table, slots)) => raw,
            _ => {
                fresh.resize(slots * 16, 0);
                read(pid, table, &mut fresh)?;
                tables.retain(|t| t.0 != set);
                tables.push((set, table, slots));
                &fresh[..]
            }
        };
        let mut entries: Vec<(usize, usize)> = raw
            .chunks_exact(16)
            .map(|slot| (usize_at(slot, 0), usize_at(slot, 8)))
            .filter(|&(key, hash)| hash as i64 != -1 && key != 0 && key.is_multiple_of(8))
            .collect();
        entries.truncate(limit);
        out.push(entries);
    }
    Ok(out)
}

/// The object whose address hashes to `hash` by the default hash of objects (3.11–3.13:
/// `_Py_HashPointer`, the address rotated right by four bits), which a task keeps unless its
/// class says otherwise; its weak references hash as it does.
pub fn hashed_address(hash: usize) -> usize {
    hash.rotate_left(4)
}

/// A task's name: its `str`, or `Task-N` where 3.13+ keep only the number until asked.
pub fn task_name(pid: i32, layout: &Layout, types: &mut Types, name: usize) -> Result<String> {
    if name == 0 {
        bail!("a task without a name: a torn read");
    }
    let info = types.of(pid, name, None)?;
    match info.kind {
        Kind::Str => string(pid, layout, name),
        Kind::Int => {
            // a small non-negative int: its size or tag word, then 30-bit digits
            let mut raw = [0u8; 32];
            read(pid, name, &mut raw)?;
            let tag = usize_at(&raw, 16);
            let ndigits = if layout.minor >= 12 { tag >> 3 } else { tag };
            let digits = [u32_at(&raw, 24), u32_at(&raw, 28)];
            let value = match ndigits {
                0 => 0u64,
                1 => u64::from(digits[0]),
                2 => u64::from(digits[0]) | (u64::from(digits[1]) << 30),
                _ => bail!("a task number of {ndigits} digits"),
            };
            Ok(format!("Task-{value}"))
        }
        other => bail!("a task name that is a {other:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::process::memory::MemoryReads;

    /// A type object of this process laid out as CPython's, named `name` (NUL-terminated).
    fn type_object(name: &'static [u8]) -> Box<[u8; TYPE_READ]> {
        let mut raw = Box::new([0u8; TYPE_READ]);
        raw[TP_NAME..TP_NAME + 8].copy_from_slice(&(name.as_ptr() as usize).to_le_bytes());
        raw
    }

    /// A set's header: its type, mask and table.
    fn set_head(ty: usize, slots: usize, table: usize) -> Box<[u8; SET_HEAD]> {
        let mut raw = Box::new([0u8; SET_HEAD]);
        raw[8..16].copy_from_slice(&ty.to_le_bytes());
        raw[SET_MASK..SET_MASK + 8].copy_from_slice(&(slots - 1).to_le_bytes());
        raw[SET_TABLE..SET_TABLE + 8].copy_from_slice(&table.to_le_bytes());
        raw
    }

    /// A table of `slots` entries holding `members` (key, hash) from slot 0 on.
    fn table(slots: usize, members: &[(usize, usize)]) -> Vec<u8> {
        let mut raw = vec![0u8; slots * 16];
        for (i, &(key, hash)) in members.iter().enumerate() {
            raw[i * 16..i * 16 + 8].copy_from_slice(&key.to_le_bytes());
            raw[i * 16 + 8..i * 16 + 16].copy_from_slice(&hash.to_le_bytes());
        }
        raw
    }

    fn calls() -> u64 {
        MemoryReads::of_this_thread().calls
    }

    #[test]
    fn a_set_whose_table_stands_is_read_with_its_header_in_one_call() {
        let pid = std::process::id() as i32;
        let ty = type_object(b"set\0");
        let mut types = Types::default();
        let mut tables = Vec::new();
        // a member, a removed one (hash -1) and an empty slot
        let mut first = table(8, &[(0x1000, 1), (0x2000, usize::MAX)]);
        let mut head = set_head(ty.as_ptr() as usize, 8, first.as_ptr() as usize);
        let set = head.as_ptr() as usize;
        let read = sets_entries(pid, &mut types, &[set], &mut tables, 100).expect("reads");
        assert_eq!(read, vec![vec![(0x1000, 1)]]);
        assert_eq!(tables, vec![(set, first.as_ptr() as usize, 8)]);
        // the same table, changed: read with the header, in one call
        first[16..32].copy_from_slice(&table(1, &[(0x3000, 3)]));
        std::hint::black_box(&first);
        let before = calls();
        let read = sets_entries(pid, &mut types, &[set], &mut tables, 100).expect("reads");
        assert_eq!(calls() - before, 1);
        assert_eq!(read, vec![vec![(0x1000, 1), (0x3000, 3)]]);
        // grown into a new table: that one is read, and kept for the next read
        let second = table(16, &[(0x4000, 4)]);
        head[SET_TABLE..SET_TABLE + 8].copy_from_slice(&(second.as_ptr() as usize).to_le_bytes());
        head[SET_MASK..SET_MASK + 8].copy_from_slice(&15usize.to_le_bytes());
        std::hint::black_box(&head);
        let read = sets_entries(pid, &mut types, &[set], &mut tables, 100).expect("reads");
        assert_eq!(read, vec![vec![(0x4000, 4)]]);
        assert_eq!(tables, vec![(set, second.as_ptr() as usize, 16)]);
        // a mask that is no power of two less one: torn
        head[SET_MASK..SET_MASK + 8].copy_from_slice(&14usize.to_le_bytes());
        std::hint::black_box(&head);
        assert!(sets_entries(pid, &mut types, &[set], &mut tables, 100).is_err());
    }
}
