//! `leash probe`: the containment self-test ([`crate::shared::probe`]) run in this process, for a person or a
//! harness checking a sandbox or pod: one line per probe, exit 1 when anything got through.

use crate::cli::ProbeArgs;
use crate::exit::Exit;
use crate::shared::probe;

pub fn run(args: &ProbeArgs) -> Exit {
    let expected = probe::Expected { tcp: args.expect.clone(), udp: args.expect_udp.clone() };
    let probes = probe::run(&expected);
    let shown: Vec<probe::Probe> = probes.iter().filter(|p| !args.quiet || !p.ok).cloned().collect();
    print!("{}", probe::report(&shown));
    if probe::contained(&probes) {
        Exit::Ok
    } else {
        eprintln!("leash probe: not contained: {} way(s) out are open", probes.iter().filter(|p| !p.ok).count());
        Exit::Refused
    }
}
