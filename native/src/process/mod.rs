//! The target process as seen from outside: its memory (`memory`: `process_vm_readv` reads and
//! batches), what /proc says of it (`procfs`: start time, liveness) and of its threads
//! (`runstate`: running or asleep, and in which system call; `cpuwait`: which runnable
//! threads wait for a CPU), and py-spy's attachment to it
//! (`attach`, with why it failed). It knows nothing of Python's objects.

pub mod attach;
pub mod cpuwait;
pub mod memory;
pub mod procfs;
pub mod runstate;
