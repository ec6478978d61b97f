//! The open-file limit: raised to the hard limit when leash starts, and the proxy's connection bound fitted under
//! it, so that connections wait in the backlog rather than fail for want of a descriptor.

/// A proxy holds two descriptors per connection: lift the soft limit on open files to the hard limit, so the
/// connection bound, not a default of 1,024, is what limits leash.
pub fn raise_fd_limit() {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let limit = getrlimit(Resource::Nofile);
    if limit.current < limit.maximum {
        let raised = Rlimit { current: limit.maximum, maximum: limit.maximum };
        if let Err(e) = setrlimit(Resource::Nofile, raised) {
            tracing::warn!("cannot raise the open-file limit: {e}");
        }
    }
}

/// Below this many concurrent connections, a lowered bound is worth a warning.
const FEW_CONNECTIONS: usize = 1024;

/// `limits` with the connection bound lowered to what the open-file limit (raised by [`raise_fd_limit`]) can serve: past it, accepts
/// and upstream dials fail with EMFILE and an ordinary request gets a 502; under it, connections wait in the backlog.
pub fn fit_open_files(limits: leash_proxy::Limits) -> leash_proxy::Limits {
    let open_files = rustix::process::getrlimit(rustix::process::Resource::Nofile).current.unwrap_or(u64::MAX);
    let (fitted, lowered) = limits.within_open_files(open_files);
    // A warning only where the bound is low enough to matter to an ordinary run; leash run prints its warnings
    // beside the command's output, so a note about thousands of connections is for RUST_LOG=info.
    if lowered && fitted.max_connections < FEW_CONNECTIONS {
        tracing::warn!(
            "the open-file limit ({open_files}) allows only {} concurrent connections; raise it (LimitNOFILE, \
             ulimit -n) for more",
            fitted.max_connections
        );
    } else if lowered {
        tracing::info!("the open-file limit ({open_files}) allows {} concurrent connections", fitted.max_connections);
    }
    fitted
}
