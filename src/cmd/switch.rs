//! `leash policy switch --control SOCKET FILE`: a client of a running `leash run` or `leash proxy`'s control socket
//! (`--control`) that puts the policy in FILE in force ([`crate::shared::control`] does the switch, and its reply is
//! said here).

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;

use crate::cli::PolicySwitchArgs;
use crate::exit::{Exit, Failure};
use crate::shared::ask::protocol::line;
use crate::shared::control::{Reply, Request};

pub fn run(args: &PolicySwitchArgs) -> Result<Exit, Failure> {
    // leash reads the file itself, maybe from another directory than this one's.
    let policy = std::path::absolute(&args.policy)
        .map_err(|e| Failure::usage(format!("leash policy switch: `{}`: {e}", args.policy.display())))?;
    let request = Request::Switch { policy, profile: args.profile.clone() };
    let socket = &args.control;
    let reply = ask(socket, &request)
        .map_err(|e| Failure::refused(format!("leash policy switch: {}: {e}", socket.display())))?;
    match reply {
        Reply { ok: true, error, policy, generation, cut, .. } => {
            println!(
                "switched to {} (generation {}): {} open connection(s) it refuses cut",
                policy.unwrap_or_default(),
                generation.unwrap_or_default(),
                cut.unwrap_or_default()
            );
            // Switched, but something to say (the audit line could not be written).
            if let Some(why) = error {
                eprintln!("leash policy switch: {why}");
            }
            Ok(Exit::Ok)
        }
        Reply { error, .. } => Err(Failure::refused(format!(
            "leash policy switch: refused; the policy in force stays:\n{}",
            error.unwrap_or_default()
        ))),
    }
}

/// One request and its reply.
fn ask(socket: &std::path::Path, request: &Request) -> std::io::Result<Reply> {
    let mut stream = UnixStream::connect(socket)?;
    stream.write_all(line(request).as_bytes())?;
    let mut reply = String::new();
    BufReader::new(stream).read_line(&mut reply)?;
    serde_json::from_str(&reply).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}
