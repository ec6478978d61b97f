//! `leash probe`: the containment self-test ([`crate::shared::probe`]) run in this process, for a person or a
//! harness checking a sandbox or pod: one line per probe, exit 1 when anything got through.

use crate::cli::ProbeArgs;
use crate::exit::{Exit, Failure};
use crate::shared::probe;

pub fn run(args: &ProbeArgs) -> Result<Exit, Failure> {
    let wall = if args.policed_outside { probe::Wall::Outside } else { probe::Wall::Here };
    let expected = probe::Expected {
        tcp: args.expect.clone(),
        udp: args.expect_udp.clone(),
        canaries: args.canary.clone(),
        wall,
        resolv_conf: None,
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
