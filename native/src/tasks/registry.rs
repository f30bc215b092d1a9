//! Where the live tasks are found. 3.11–3.13: the registry of `asyncio.tasks` (`_all_tasks`,
//! or `_scheduled_tasks` and `_eager_tasks`), which the C `_asyncio` module replaces with its
//! own objects of the same names, found once through `sys.modules`. 3.14+: the C module keeps
//! its tasks in a linked list per thread state (and one in the interpreter state for tasks of
//! threads that ended), whose offsets its `AsyncioDebug` ELF section publishes.

use anyhow::{anyhow, bail, Context, Result};

use super::layout::{Registry, ASYNCIO_DEBUG_WORDS};
use super::objects::{
    dict_get, hashed_address, sets_entries, Kind, SetTable, TypeInfo, Types, INLINE_VALUES,
    MERGE_GAP,
};
use super::Target;
use crate::process::memory::{read, read_pieces, usize_at, Batch};
use crate::walker::Layout;

/// Sanity bounds against torn or garbage reads.
const MAX_THREADS: usize = 4096;

/// The objects a 3.11–3.13 registry keeps its tasks in: sets of weak references to them (the
/// `data` of its WeakSets, which a WeakSet keeps for its life, found once) and sets.
#[derive(Debug, Clone, Default)]
pub struct Sets {
    pub weak: Vec<usize>,
    pub strong: Vec<usize>,
    /// Whether the weak references' hashes stood for their tasks' addresses at the last read
    /// of the references (`hashed_address`): while they do, the tasks are taken from the
    /// hashes in the sets' tables and the references are not read. A scan whose reads of
    /// the tasks tore reads the references again (`distrust_hashes`).
    hashed: bool,
    /// Where the last read found each set's table.
    tables: Vec<SetTable>,
}

impl Sets {
    /// The next scan reads the weak references again, and checks their hashes anew.
    pub fn distrust_hashes(&mut self) {
        self.hashed = false;
    }
}

/// Finds the registry's objects through `sys.modules["asyncio.tasks"]`.
pub fn find_sets(target: &Target, types: &mut Types) -> Result<Sets> {
    let (pid, layout, tasks, interpreter) =
        (target.pid, &target.layout, &target.tl, target.interpreter);
    let mut word = [0u8; 8];
    read(pid, interpreter + layout.interp_modules, &mut word)?;
    let modules = usize_at(&word, 0);
    let module = dict_get(pid, layout, types, modules, "asyncio.tasks")
        .context("cannot read sys.modules")?
        .ok_or_else(|| anyhow!("asyncio is not imported"))?;
    types.expect(pid, module, None, Kind::Module)?;
    read(pid, module + 16, &mut word)?;
    let globals = usize_at(&word, 0);
    let (weak, strong): (&[&str], &[&str]) = match tasks.registry {
        Registry::AllTasks => (&["_all_tasks"], &[]),
        Registry::ScheduledAndEager => (&["_scheduled_tasks"], &["_eager_tasks"]),
        Registry::Lists => (&[], &[]),
    };
    let mut sets = Sets::default();
    for (names, kind, out) in [
        (weak, Kind::WeakSet, &mut sets.weak),
        (strong, Kind::Set, &mut sets.strong),
    ] {
        for name in names {
            let found = dict_get(pid, layout, types, globals, name)?
                .ok_or_else(|| anyhow!("asyncio.tasks has no {name}"))?;
            types.expect(pid, found, None, kind)?;
            out.push(match kind {
                Kind::WeakSet => weakset_data(pid, layout, types, found)?,
                _ => found,
            });
        }
    }
    Ok(sets)
}

/// The objects the WeakSets and sets hold now, up to `limit` (unchecked: the scan checks
/// each task's type), and how many weak references could not be followed (freed as they
/// were read).
pub fn set_tasks(
    pid: i32,
    types: &mut Types,
    sets: &mut Sets,
    limit: usize,
) -> Result<(Vec<usize>, u64)> {
    let mut out = Vec::new();
    let mut torn = 0;
    // every set's header and table in one read: the strong sets, then the weak ones' data
    let all: Vec<usize> = sets.strong.iter().chain(&sets.weak).copied().collect();
    let mut entries = sets_entries(pid, types, &all, &mut sets.tables, limit)?.into_iter();
    for members in entries.by_ref().take(sets.strong.len()) {
        out.extend(members.into_iter().map(|(key, _)| key));
    }
    let mut agree = true;
    for refs in entries {
        if sets.hashed {
            out.extend(refs.iter().map(|&(_, hash)| hashed_address(hash)));
            continue;
        }
        // each member is a weak reference: its referent follows the header
        let pieces: Vec<(usize, usize)> = refs.iter().map(|&(r, _)| (r, 24)).collect();
        let batch = Batch::read_merged(pid, &pieces, MERGE_GAP);
        for &(r, hash) in &refs {
            let Some(raw) = batch.get(r, 24) else {
                torn += 1;
                continue;
            };
            match types.of(pid, r, Some(raw)) {
                Ok(info) if info.kind == Kind::WeakRef => {
                    let task = usize_at(raw, 16);
                    agree &= hashed_address(hash) == task;
                    out.push(task);
                }
                _ => torn += 1,
            }
        }
    }
    sets.hashed = agree;
    out.sort_unstable();
    out.dedup();
    out.truncate(limit);
    Ok((out, torn))
}

/// The `data` set of a WeakSet: the first attribute `WeakSet.__init__` sets, kept in the
/// instance's values (where each version keeps them) or, once materialized, in its dict.
fn weakset_data(pid: i32, layout: &Layout, types: &mut Types, weak: usize) -> Result<usize> {
    let info = types.expect(pid, weak, None, Kind::WeakSet)?;
    first_attribute(pid, layout, types, (weak, info), ("data", Kind::Set), 4)
}

/// The attribute `name` of the Python instance `object` (of type `info`), known to be the
/// first of kind `kind` among the first `scan` attributes its `__init__` sets: found in the
/// instance's values (where each version keeps them) as that, or by name in its dict once
/// materialized.
pub fn first_attribute(
    pid: i32,
    layout: &Layout,
    types: &mut Types,
    object: (usize, TypeInfo),
    wanted: (&str, Kind),
    scan: usize,
) -> Result<usize> {
    Ok(find_attribute(pid, layout, types, object, wanted, scan, 0)?.0)
}

/// Where an attribute found among an instance's values lives: its slot, and the word that
/// tells the values are still there, read with it (a later read of the slot alone could
/// find values the instance let go of: moved into a dict it made of them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    /// 3.11 the values' pointer, 3.12 the tagged one, 3.13+ the inline values' header.
    guard: usize,
    /// What of the guard must not have changed, and what it held.
    mask: usize,
    held: usize,
    pub at: usize,
}

/// The bytes a `Slot::read_with` reads before the piece read with it.
pub const SLOT_READ: usize = 16;

impl Slot {
    /// Reads the slot's value and, in the same call, `with` (into `out[SLOT_READ..]`): the
    /// value, or None once the values moved (the attribute must be found again).
    pub fn read_with(
        &self,
        pid: i32,
        with: (usize, usize),
        out: &mut [u8],
    ) -> Result<Option<usize>> {
        read_pieces(pid, &[(self.guard, 8), (self.at, 8), with], out)?;
        Ok((usize_at(out, 0) & self.mask == self.held).then(|| usize_at(out, 8)))
    }
}

/// As `first_attribute`, for the first value of its kind other than `other` (another
/// attribute of the same kind, set before it; 0: none), with the slot of its value when the
/// instance keeps its values apart from a dict (None: found by name in its dict).
pub fn find_attribute(
    pid: i32,
    layout: &Layout,
    types: &mut Types,
    (weak, info): (usize, TypeInfo),
    (name, kind): (&str, Kind),
    scan: usize,
    other: usize,
) -> Result<(usize, Option<Slot>)> {
    let mut pre = [0u8; 16];
    read(pid, weak - 32, &mut pre)?;
    let (values, dict, guard) = match layout.minor {
        // the values' pointer, then the dict's, before the GC header
        11 => {
            let word = usize_at(&pre, 0);
            (word, usize_at(&pre, 8), (weak - 32, !0, word))
        }
        // one word before the GC header: values tagged with the low bit, or the dict
        12 => {
            let word = usize_at(&pre, 8);
            if word & 1 == 1 {
                (word + 1, 0, (weak - 24, !0, word))
            } else {
                (0, word, (0, 0, 0))
            }
        }
        // values inline after the object (8 bytes of header; valid in its fourth byte)
        _ => {
            let mut head = [0u8; 8];
            let inline = weak + info.basicsize;
            if info.flags & INLINE_VALUES != 0 {
                read(pid, inline, &mut head)?;
            }
            if head[3] != 0 {
                (
                    inline + 8,
                    0,
                    (inline, 0xff << 24, usize_at(&head, 0) & 0xff << 24),
                )
            } else {
                (0, usize_at(&pre, 8), (0, 0, 0))
            }
        }
    };
    if values != 0 {
        let mut words = vec![0u8; scan * 8];
        read(pid, values, &mut words)?;
        for i in 0..scan {
            let value = usize_at(&words, i * 8);
            if value != 0 && value != other && types.of(pid, value, None)?.kind == kind {
                let (guard, mask, held) = guard;
                let at = values + i * 8;
                return Ok((
                    value,
                    Some(Slot {
                        guard,
                        mask,
                        held,
                        at,
                    }),
                ));
            }
        }
        bail!("an object without its {name}");
    }
    let value = dict_get(pid, layout, types, dict, name)?
        .ok_or_else(|| anyhow!("an object without {name}"))?;
    Ok((value, None))
}

/// The address of the `_asyncio` module's `AsyncioDebug` section in the target (3.14+): in
/// the `_asyncio` extension, or in the interpreter's binary or library where it is built in.
pub fn asyncio_debug(pid: i32) -> Result<usize> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps"))?;
    let mut seen: Vec<&str> = Vec::new();
    for line in maps.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [range, _perms, offset, _dev, _inode, path] = fields[..] else {
            continue;
        };
        let name = path.rsplit('/').next().unwrap_or(path);
        let candidate = name.contains("python") || name.starts_with("_asyncio");
        if !candidate || !offset.trim_start_matches('0').is_empty() || seen.contains(&path) {
            continue;
        }
        seen.push(path);
        let start = range
            .split('-')
            .next()
            .and_then(|s| usize::from_str_radix(s, 16).ok())
            .unwrap_or(0);
        if let Some(address) = section_in(pid, path, start) {
            return Ok(address);
        }
    }
    bail!("asyncio is not imported (no _asyncio module with its AsyncioDebug section is loaded)")
}

/// Where the section lies in the target, for the file at `path` mapped from `start`.
fn section_in(pid: i32, path: &str, start: usize) -> Option<usize> {
    use goblin::elf::{header::ET_DYN, program_header::PT_LOAD, Elf};
    let inside = format!("/proc/{pid}/root{path}");
    let bytes = std::fs::read(&inside)
        .or_else(|_| std::fs::read(path))
        .ok()?;
    let elf = Elf::parse(&bytes).ok()?;
    let section = elf.section_headers.iter().find(|sh| {
        matches!(
            elf.shdr_strtab.get_at(sh.sh_name),
            Some(".AsyncioDebug" | "AsyncioDebug")
        )
    })?;
    if (section.sh_size as usize) < ASYNCIO_DEBUG_WORDS * 8 {
        return None;
    }
    let base = if elf.header.e_type == ET_DYN {
        let low = elf
            .program_headers
            .iter()
            .filter(|ph| ph.p_type == PT_LOAD)
            .map(|ph| ph.p_vaddr as usize & !0xfff)
            .min()?;
        start.checked_sub(low)?
    } else {
        0
    };
    Some(base + section.sh_addr as usize)
}

/// The tasks in the per-thread and per-interpreter lists (3.14+), up to `limit`, and how many
/// lists ended early on a torn read. The links are taken from `known` (the scan's first read,
/// of the last scan's tasks) where it holds them, so that a list of tasks already seen is
/// followed without a read per task; a task new since is read on its own.
pub fn list_tasks(target: &Target, limit: usize, known: &Batch) -> Result<(Vec<usize>, u64)> {
    let (pid, layout, tasks, interpreter) =
        (target.pid, &target.layout, &target.tl, target.interpreter);
    let (Some(node), Some(thread_head), Some(interp_head)) = (
        tasks.task_node,
        tasks.thread_tasks_head,
        tasks.interp_tasks_head,
    ) else {
        bail!("no task lists in Python 3.{}", tasks.minor);
    };
    let mut word = [0u8; 8];
    read(pid, interpreter + layout.interp_threads_head, &mut word)?;
    let mut heads = vec![interpreter + interp_head];
    let mut thread = usize_at(&word, 0);
    while thread != 0 {
        if heads.len() > MAX_THREADS {
            bail!("more than {MAX_THREADS} Python threads: a torn read");
        }
        heads.push(thread + thread_head);
        read(pid, thread + layout.tstate_next, &mut word)?;
        thread = usize_at(&word, 0);
    }
    let mut out = Vec::new();
    let mut torn = 0;
    for head in heads {
        read(pid, head, &mut word)?;
        let mut next = usize_at(&word, 0);
        while next != head && out.len() < limit {
            if next == 0 || !next.is_multiple_of(8) || next < node {
                torn += 1;
                break;
            }
            out.push(next - node);
            if let Some(link) = known.get(next, 8) {
                next = usize_at(link, 0);
                continue;
            }
            if read(pid, next, &mut word).is_err() {
                torn += 1;
                break;
            }
            next = usize_at(&word, 0);
        }
    }
    out.sort_unstable();
    out.dedup();
    Ok((out, torn))
}
