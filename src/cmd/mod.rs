//! One module per subcommand; each takes its parsed arguments and returns an [`crate::exit::Exit`]. What several
//! share is in [`crate::shared`]: no subcommand imports another.

pub mod ask;
pub mod attach;
pub mod attach_dir;
pub mod check;
pub mod docker;
pub mod docs;
pub mod explain;
pub mod log;
pub mod policy;
pub mod presets;
pub mod probe;
pub mod proxy;
pub mod run;
pub mod switch;
