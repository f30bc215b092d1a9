//! One read of every thread for `sidecar dump`: each thread's sample as the sampler takes it,
//! and its frames as structured parts (function, file, line), innermost first, with the
//! locals of each when asked for (`values`). The frames are walked whole (no walk is taken
//! again from an earlier one), and each one's address kept, so that its locals can be read.

use anyhow::{bail, Result};

use super::values::Values;
use super::Walker;
use crate::stack::{RunState, Trace};

/// A frame of a dump, innermost first in its thread.
#[derive(Debug, Clone)]
pub struct DumpedFrame {
    pub function: String,
    pub file: String,
    pub line: i32,
    /// (name, short repr) of each bound local, when they were asked for; Err: why they did
    /// not read.
    pub locals: Option<std::result::Result<Vec<(String, String)>, String>>,
}

/// A thread of a dump: its sample (state, GIL, folded stack) and its frames.
#[derive(Debug, Clone)]
pub struct DumpedThread {
    pub trace: Trace,
    pub frames: Vec<DumpedFrame>,
}

impl Walker {
    /// Every thread as one sample reads it, with its frames; with `locals`, each frame's
    /// locals too, their str and bytes values cut at `locals` characters.
    pub fn read_dump(
        &mut self,
        run_state: RunState<'_>,
        locals: Option<usize>,
    ) -> Result<Vec<DumpedThread>> {
        self.dumped = Some(Vec::new());
        let traces = self.read(run_state);
        let addresses = self.dumped.take().unwrap_or_default();
        let traces = traces?;
        let Some(room) = self.room.take() else {
            bail!("a dump without the sample's frames");
        };
        let result = self.dumped_threads(traces, &room.1, &addresses, locals);
        self.room = Some(room);
        result
    }

    fn dumped_threads(
        &self,
        traces: Vec<Trace>,
        scratch: &super::Scratch,
        addresses: &[usize],
        locals: Option<usize>,
    ) -> Result<Vec<DumpedThread>> {
        if addresses.len() != scratch.frames.len() || traces.len() != scratch.threads.len() {
            bail!("a dump whose frames and addresses differ");
        }
        let mut values = locals.map(|chars| Values::new(self.pid, &self.layout, chars));
        let mut threads = Vec::with_capacity(traces.len());
        for (trace, (_, range, _, _)) in traces.into_iter().zip(&scratch.threads) {
            let mut frames = Vec::with_capacity(range.len());
            for i in range.clone() {
                let (address, offset) = scratch.frames[i];
                let Some(code) = self.codes.get(&address) else {
                    bail!("a frame whose code was not read");
                };
                if code.hidden {
                    continue;
                }
                let (function, file, line) = code.parts(offset);
                let locals = values.as_mut().map(|values| {
                    values
                        .locals(addresses[i], address, &code.header)
                        .map_err(|err| format!("{err:#}"))
                });
                frames.push(DumpedFrame {
                    function: function.to_string(),
                    file: file.to_string(),
                    line,
                    locals,
                });
            }
            threads.push(DumpedThread { trace, frames });
        }
        Ok(threads)
    }
}
