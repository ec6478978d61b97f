//! `leash probe`: the containment self-test ([`crate::shared::probe`]) run in this process, for a person or a
//! harness checking a sandbox or pod: one line per probe, exit 1 when anything got through. And [`in_sandbox`], the
//! same test run by `leash run`'s user-namespace sandbox in the command's place, which then becomes the command.

use std::ffi::OsString;
use std::process::ExitCode;

use leash_sandbox::self_test::Trampoline;

use crate::cli::ProbeArgs;
use crate::exit::{Exit, Failure};
use crate::shared::probe::{self, IN_SANDBOX};

/// `leash __sandbox-self-test [--expect ADDR]... [--expect-udp ADDR]... -- FD PROGRAM ARGV...`, run by the sandbox
/// as the command would run, just before it: the self-test, with leash's listeners found listening rather than
/// connected to ([`probe::Reach::Listed`]); then, when nothing got through, the command in this process's place.
/// What got through is written on the sandbox's report pipe, and `leash run` refuses the run naming it. Nothing here
/// may change what the command inherits (limits, signals, the environment): it runs before any of `main`'s set-up.
pub fn in_sandbox(args: &[OsString]) -> ExitCode {
    let (own, handed) = args.split_at(args.iter().position(|a| a == "--").unwrap_or(args.len()));
    let taken = Trampoline::from_args(handed).and_then(|trampoline| Ok((trampoline, expected_in_sandbox(own)?)));
    let (trampoline, expected) = match taken {
        Ok(taken) => taken,
        Err(why) => {
            eprintln!("leash {IN_SANDBOX}: {why} (this is started by `leash run`'s sandbox, not by hand)");
            return Exit::Usage.into();
        }
    };
    let probes = probe::run(&expected);
    if probe::contained(&probes) {
        // Returns only when the command's `execve` failed, which the report says.
        let _failed = trampoline.pass();
        return ExitCode::from(EXEC_FAILED);
    }
    let open: Vec<probe::Probe> = probes.into_iter().filter(|p| !p.ok).collect();
    trampoline.refuse(&probe::report(&open))
}

/// The status of a command that could not be executed, as shells give it.
const EXEC_FAILED: u8 = 127;

/// What [`in_sandbox`] expects of leash: `--expect ADDR` for each TCP listener, `--expect-udp ADDR` for each UDP
/// socket.
fn expected_in_sandbox(args: &[OsString]) -> Result<probe::Expected, String> {
    let mut expected = probe::Expected { reach: probe::Reach::Listed, ..probe::Expected::default() };
    let mut args = args.iter();
    while let Some(flag) = args.next() {
        let addr = args.next().and_then(|a| a.to_str()).and_then(|a| a.parse().ok());
        match (flag.to_str(), addr) {
            (Some("--expect"), Some(addr)) => expected.tcp.push(addr),
            (Some("--expect-udp"), Some(addr)) => expected.udp.push(addr),
            _ => return Err(format!("unexpected `{}`", flag.to_string_lossy())),
        }
    }
    Ok(expected)
}

pub fn run(args: &ProbeArgs) -> Result<Exit, Failure> {
    let wall = if args.policed_outside { probe::Wall::Outside } else { probe::Wall::Here };
    let expected = probe::Expected {
        tcp: args.expect.clone(),
        udp: args.expect_udp.clone(),
        canaries: args.canary.clone(),
        wall,
        resolv_conf: None,
        reach: probe::Reach::Connect,
    };
    if args.stepwise {
        return Ok(stepwise(&expected));
    }
    let probes = probe::run(&expected);
    let shown: Vec<probe::Probe> = probes.iter().filter(|p| !args.quiet || !p.ok).cloned().collect();
    print!("{}", probe::report(&shown));
    if probe::contained(&probes) {
        Ok(Exit::Ok)
    } else {
        let open = probes.iter().filter(|p| !p.ok).count();
        Err(Failure::new(Exit::Refused, format!("leash probe: not contained: {open} way(s) out are open")))
    }
}

/// `--stepwise`, for `leash run`'s self-test: `STEP WHAT` before each attempt, then a line read from stdin (the go
/// ahead, once leash has read its firewall's counters), then the attempt's line. leash judges; the exit status here
/// is 0 whatever was found.
fn stepwise(expected: &probe::Expected) -> Exit {
    use std::io::{BufRead, Write};
    let stdin = std::io::stdin();
    let mut before = |what: &str| {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "STEP {what}").and_then(|()| out.flush());
        let _ = stdin.lock().read_line(&mut String::new());
    };
    let mut after = |p: &probe::Probe| {
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(probe::line(p).as_bytes()).and_then(|()| out.flush());
    };
    probe::run_stepwise(expected, &mut before, &mut after);
    Exit::Ok
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sandbox_self_test_expects_leashs_addresses_and_refuses_anything_else() {
        let args = |a: &[&str]| a.iter().map(OsString::from).collect::<Vec<_>>();
        let expected = expected_in_sandbox(&args(&["--expect", "127.0.0.1:3128", "--expect-udp", "127.0.0.1:53"]));
        let expected = expected.unwrap();
        assert_eq!(expected.tcp, ["127.0.0.1:3128".parse().unwrap()]);
        assert_eq!(expected.udp, ["127.0.0.1:53".parse().unwrap()]);
        assert_eq!(expected.reach, probe::Reach::Listed, "leash's listeners are not connected to in its sandbox");
        assert!(expected_in_sandbox(&args(&["--expect"])).is_err(), "an address is required");
        assert!(expected_in_sandbox(&args(&["--canary", "192.0.2.1:80"])).is_err());
        assert!(expected_in_sandbox(&args(&["--expect", "not-an-address"])).is_err());
    }
}
