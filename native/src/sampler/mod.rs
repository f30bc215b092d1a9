//! Sampling one target at a fixed rate: the session the Python side holds (`session`), the
//! readers of its stacks (`readers`: the own walker, py-spy as fallback, and `threadmap`, the
//! OS's on-CPU states of py-spy's threads), the runner that reads a sample each tick and counts
//! it into windows (`runner`, `windows`), the stalls of its event loops (`stalls`), the clock shared by the samplers that ask for it
//! (`clock`), and the task scans on a thread of their own (`task_ticks`).

pub mod clock;
pub mod dump;
pub mod readers;
pub mod requests;
pub mod runner;
pub mod session;
pub mod stalls;
pub mod task_ticks;
pub mod threadmap;
pub mod windows;

pub use session::Session;
