//! One module per subcommand; each takes its parsed arguments and returns an [`crate::exit::Exit`].

pub mod check;
pub mod docker;
pub mod explain;
pub mod proxy;
pub mod run;
pub mod sandboxed;
pub mod trust;
