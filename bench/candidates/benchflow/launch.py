#!/usr/bin/env python3
"""Start benchflow's egress denylist proxy (the unmodified _egress_denylist_proxy.py from its wheel, in
$BENCHFLOW_SRC) with its own
command line, after widening one check for a test network.

    BF_PUBLIC_NETS=CIDR[,CIDR...] launch.py --port N --policy policy.json --cert-dir DIR --ca-cert CA --ca-key KEY \
        --openssl OPENSSL [--log JSONL] [--upstream-ca BUNDLE]

The proxy refuses every destination whose addresses are not all `ipaddress.ip_address(a).is_global`
(`_upstream_allowed`; there is no exemption list). Test networks stand in for the internet with ranges Python
does not call global (documentation ranges, loopback). Addresses inside BF_PUBLIC_NETS are treated as global;
every other address is judged by benchflow's own function, unchanged. Without BF_PUBLIC_NETS this is exactly
`python3 _egress_denylist_proxy.py ARGS`.
"""
import importlib.util
import ipaddress
import os
import sys

# Where benchflow's own files were unpacked from its wheel (benchflow.sh fetch); nothing of benchflow is kept in
# this repository.
HERE = os.environ.get("BENCHFLOW_SRC") or os.path.dirname(os.path.abspath(__file__))


def main():
    spec = importlib.util.spec_from_file_location("_egress_denylist_proxy",
                                                  os.path.join(HERE, "_egress_denylist_proxy.py"))
    bf = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = bf
    spec.loader.exec_module(bf)
    nets = [ipaddress.ip_network(n.strip()) for n in os.environ.get("BF_PUBLIC_NETS", "").split(",") if n.strip()]
    if nets:
        benchflows_own = bf._upstream_allowed

        def _upstream_allowed(address):
            if benchflows_own(address):
                return True
            try:
                a = ipaddress.ip_address(address)
            except ValueError:
                return False
            return any(a.version == n.version and a in n for n in nets)

        bf._upstream_allowed = _upstream_allowed   # looked up at call time by _connect_upstream and CONNECT
    return bf.main()


if __name__ == "__main__":
    raise SystemExit(main())
