//! Who holds the GIL, who waits for it, and whether the interpreter is collecting garbage, on
//! every CPython 3.8–3.15.
//!
//! - The holder: the GIL's `_gil_runtime_state` (`last_holder`, a thread state, and `locked`)
//!   in `_PyRuntime.ceval.gil` up to 3.11, behind the interpreter's `ceval.gil` from 3.12 (the
//!   main interpreter's own `_gil`, whose place 3.13+ publish in `_Py_DebugOffsets`). py-spy's
//!   `--gil` reads the same. 3.15 also keeps `holds_gil` in each thread state.
//! - The waiters: 3.15 keeps `gil_requested` in each thread state (a waiter when another thread
//!   holds the GIL; taken uncontended, it is requested for an instant). Before it nothing in memory
//!   tells, but the kernel does: a thread waiting for the GIL sleeps in `futex` on one of the
//!   GIL's own condition variables or mutexes, which lie inside `_gil_runtime_state`, and its
//!   /proc `syscall` file names the futex's address. A lock's `acquire` or a condition's
//!   `wait` sleeps on another address, so it stays what it is.
//! - Garbage collection: the interpreter's (3.8: the runtime's) `gc.collecting`; the thread
//!   that collects is the one that holds the GIL.
//!
//! The offsets: 3.8–3.12 from each version's `Include/internal` headers (64-bit Linux, checked
//! against the running interpreters by `tests/live/test_gil.py`), 3.13+ from the target's own
//! `_Py_DebugOffsets`.

use anyhow::{bail, Result};

use crate::process::memory::{read, u32_at, usize_at};

/// The bytes of a `_gil_runtime_state` on 64-bit Linux with glibc, the same in every version
/// 3.8–3.15: `interval`, `last_holder`, `locked`, `switch_number`, then the condition variable
/// and mutex a waiter sleeps on and those of the forced switch (48 + 40 bytes each pair).
pub const GIL_SIZE: usize = 208;
/// `last_holder` and `locked` in it.
const HOLDER: usize = 8;
const LOCKED: usize = 16;

/// Where a structure lies: at an offset in `_PyRuntime`, at one in the interpreter state, or
/// behind a pointer kept at an offset in the interpreter state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum At {
    Runtime(usize),
    Interpreter(usize),
    InterpreterPointer(usize),
}

/// Where a CPython version keeps its GIL and GC state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GilTable {
    pub gil: At,
    /// The `collecting` flag (an int).
    pub collecting: At,
    /// A thread state's `thread_id` (its `pthread_t`), which names the holder's thread where
    /// the reader does not walk the thread states itself (py-spy's versions, up to 3.10).
    pub tstate_thread_id: usize,
    /// 3.15+: a thread state's `holds_gil` and `gil_requested` (ints).
    pub flags: Option<(usize, usize)>,
}

impl GilTable {
    /// The table of 3.8–3.12 (their headers); None for other versions (3.13+ publish theirs).
    pub fn of(minor: u64) -> Option<GilTable> {
        let (gil, collecting, tstate_thread_id) = match minor {
            8 => (At::Runtime(1152), At::Runtime(544), 176),
            9 | 10 => (At::Runtime(352), At::Interpreter(816), 176),
            11 => (At::Runtime(360), At::Interpreter(848), 152),
            12 => (At::InterpreterPointer(384), At::Interpreter(312), 136),
            _ => return None,
        };
        Some(GilTable {
            gil,
            collecting,
            tstate_thread_id,
            flags: None,
        })
    }
}

/// The addresses of one target's GIL and GC state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gil {
    /// The `_gil_runtime_state`.
    pub gil: usize,
    pub collecting: usize,
    pub tstate_thread_id: usize,
    pub flags: Option<(usize, usize)>,
}

/// Apart by at most this, the GIL's state and the collector's flag are read as one piece (they
/// lie in the interpreter state 100 to 800 bytes apart from 3.12 on).
const ONE_PIECE: usize = 1024;

/// What one read of the GIL's state found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GilRead {
    /// The thread state holding the GIL; 0 when it is not held (being handed over).
    pub holder: usize,
    pub collecting: bool,
}

impl Gil {
    /// The GIL and GC state of the target `pid`, whose `_PyRuntime` (0 when not known) and
    /// interpreter are at these addresses; checked: the GIL's lock reads 0 or 1.
    pub fn locate(pid: i32, table: &GilTable, runtime: usize, interpreter: usize) -> Result<Gil> {
        let resolve = |at: At| -> Result<usize> {
            Ok(match at {
                At::Runtime(_) if runtime == 0 => bail!("no _PyRuntime symbol"),
                At::Runtime(offset) => runtime + offset,
                At::Interpreter(offset) => interpreter + offset,
                At::InterpreterPointer(offset) => {
                    let mut word = [0u8; 8];
                    read(pid, interpreter + offset, &mut word)?;
                    match usize_at(&word, 0) {
                        0 => bail!("the interpreter has no GIL yet"),
                        address => address,
                    }
                }
            })
        };
        let gil = Gil {
            gil: resolve(table.gil)?,
            collecting: resolve(table.collecting)?,
            tstate_thread_id: table.tstate_thread_id,
            flags: table.flags,
        };
        let mut state = [0u8; LOCKED + 4 - HOLDER];
        read(pid, gil.gil + HOLDER, &mut state)?;
        if u32_at(&state, LOCKED - HOLDER) > 1 {
            bail!("the GIL's lock reads neither 0 nor 1");
        }
        Ok(gil)
    }

    /// What a sample reads: the holder and the lock, and the GC flag; one piece when they lie
    /// close (the second is then empty).
    pub fn pieces(&self) -> [(usize, usize); 2] {
        let state = (self.gil + HOLDER, LOCKED + 4 - HOLDER);
        let flag = (self.collecting, 4);
        let start = state.0.min(flag.0);
        let end = (state.0 + state.1).max(flag.0 + flag.1);
        if end - start <= ONE_PIECE {
            return [(start, end - start), (0, 0)];
        }
        [state, flag]
    }

    /// The state in what a batch read of `pieces` holds (`get` hands out a piece's bytes);
    /// None when they are missing or read as no real state can (a torn or wrong read).
    pub fn parse<'b>(&self, get: impl Fn((usize, usize)) -> Option<&'b [u8]>) -> Option<GilRead> {
        let (state_at, flag_at) = (self.gil + HOLDER, self.collecting);
        match self.pieces() {
            [one, (0, 0)] => {
                let bytes = get(one)?;
                let state = bytes.get(state_at - one.0..state_at - one.0 + 12)?;
                let flag = bytes.get(flag_at - one.0..flag_at - one.0 + 4)?;
                Gil::parse_bytes(state, flag)
            }
            [state, flag] => Gil::parse_bytes(get(state)?, get(flag)?),
        }
    }

    /// The state in the bytes of the holder and the lock, and of the GC flag.
    fn parse_bytes(state: &[u8], collecting: &[u8]) -> Option<GilRead> {
        let holder = usize_at(state, 0);
        let read = GilRead {
            holder: match u32_at(state, LOCKED - HOLDER) {
                0 => 0,
                1 => holder,
                _ => return None,
            },
            collecting: u32_at(collecting, 0) != 0,
        };
        Some(read)
    }

    /// Whether a thread asleep in `futex` at `address` waits for this GIL.
    pub fn is_gil_futex(&self, address: usize) -> bool {
        (self.gil..self.gil + GIL_SIZE).contains(&address)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_gil_names_its_holder_and_a_free_one_none() {
        let mut state = [0u8; 12];
        state[..8].copy_from_slice(&0x5555_0000_1000usize.to_le_bytes());
        state[8] = 1;
        let read = Gil::parse_bytes(&state, &[1, 0, 0, 0]).expect("a state");
        assert_eq!(read.holder, 0x5555_0000_1000);
        assert!(read.collecting);
        // released: last_holder stays, but nobody holds it
        state[8] = 0;
        let read = Gil::parse_bytes(&state, &[0; 4]).expect("a state");
        assert_eq!((read.holder, read.collecting), (0, false));
        // a lock that reads 2 is a torn or wrong read
        state[8] = 2;
        assert_eq!(Gil::parse_bytes(&state, &[0; 4]), None);
    }

    #[test]
    fn state_and_flag_close_together_are_one_piece() {
        // 3.14's: the collector's flag at interp+7600, the GIL at interp+7784
        let gil = Gil {
            gil: 0x10000 + 7784,
            collecting: 0x10000 + 7600,
            tstate_thread_id: 152,
            flags: None,
        };
        let [one, none] = gil.pieces();
        assert_eq!((one, none), ((0x10000 + 7600, 7784 + 20 - 7600), (0, 0)));
        let mut bytes = vec![0u8; one.1];
        bytes[..4].copy_from_slice(&1u32.to_le_bytes());
        let at = 7784 + 8 - 7600;
        bytes[at..at + 8].copy_from_slice(&0x7777usize.to_le_bytes());
        bytes[at + 8] = 1;
        let read = gil.parse(|piece| (piece == one).then_some(&bytes[..]));
        assert_eq!(
            read,
            Some(GilRead {
                holder: 0x7777,
                collecting: true
            })
        );
        // far apart (the runtime's GIL and the interpreter's flag, up to 3.11): two pieces
        let apart = Gil {
            collecting: 0x90000,
            ..gil
        };
        assert_eq!(apart.pieces()[1], (0x90000, 4));
    }

    #[test]
    fn only_a_futex_inside_the_gil_is_a_wait_for_it() {
        let gil = Gil {
            gil: 0x1000,
            collecting: 0x2000,
            tstate_thread_id: 176,
            flags: None,
        };
        // the condition variable at +32 and the mutex at +80
        assert!(gil.is_gil_futex(0x1000 + 32 + 8));
        assert!(gil.is_gil_futex(0x1000 + 80));
        assert!(!gil.is_gil_futex(0x1000 + GIL_SIZE));
        assert!(!gil.is_gil_futex(0xfff));
    }

    #[test]
    fn the_tables_place_the_gil_by_version() {
        assert_eq!(GilTable::of(8).map(|t| t.gil), Some(At::Runtime(1152)));
        assert_eq!(
            GilTable::of(12).map(|t| t.gil),
            Some(At::InterpreterPointer(384))
        );
        assert_eq!(GilTable::of(13), None);
    }
}
