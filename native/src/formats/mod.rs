//! Folded stacks in and out: flamegraph SVGs rendered (`render`, inferno) and read back
//! (`svgread`), pprof and Pyroscope's push request encoded (`pprof`), and the per-function
//! counts of a differential profile (`shares`).

pub mod pprof;
pub mod render;
pub mod shares;
pub mod svgread;
