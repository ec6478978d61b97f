//! `leash policy suggest LOG...`: a minimal YAML policy that covers what audit logs show was used. An allowlist
//! (the default) lists every host requested and allowed or let through as `would-block`, folding two or more
//! subdomains of one registrable domain (the public-suffix list decides which that is) into one `.domain` entry; a
//! blocklist keeps every used host reachable and blocks the hosts that were only ever refused. Each entry carries a
//! comment saying how often it was used. IP literals and names refused as internal destinations never become
//! allow entries, and a name only looked up through the DNS stub, never requested, needs none.
//!
//! Ask mode's lines: a host a person approved (`approved`) is used, its comment says so (and that an `always` one is
//! in the policy file already); one a person refused (`denied`) is listed in the header as such and never
//! suggested; one nobody answered in time (`ask-timeout`) is offered commented out, as a `not-allowed` one is.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::Path;

use leash_policy::{load, parse_host, Format, Host, Reason, Verdict};

use crate::cli::{PolicySuggestArgs, SuggestMode};
use crate::exit::{Exit, Failure};
use crate::policy_file::invalid;
use crate::shared::audit_read::{read_logs, LogFile, Record};

/// Refusal reasons that no suggestion may turn into an allow: the destination check and the IP-literal rule must
/// keep refusing such requests whatever the policy lists.
const NEVER_ALLOW: [Reason; 2] = [Reason::IpLiteral, Reason::InternalDestination];

/// The ports a policy without `ports` / `tunnel_ports` has (docs/policy.md); a suggestion names only more.
const DEFAULT_PORTS: [u16; 2] = [80, 443];
const DEFAULT_TUNNEL_PORTS: [u16; 1] = [443];

pub fn suggest(args: &PolicySuggestArgs) -> Result<Exit, Failure> {
    if let Some(out) = &args.output {
        if Format::from_path(out) != Some(Format::Yaml) {
            let why = format!("`{}`: the suggestion is YAML; name the file .yaml or .yml", out.display());
            return Err(Failure::new(Exit::Usage, format!("leash policy suggest: {why}")));
        }
    }
    let files = read_logs("policy suggest", &args.logs)?;
    let usage = Usage::of(&files);
    let text = match args.mode {
        SuggestMode::Allowlist => allowlist(&usage),
        SuggestMode::Blocklist => blocklist(&usage),
    };
    // The suggestion is meant to pass `leash check`: a text that does not load is a bug here, not the user's.
    if let Err(errors) = load(&text, Format::Yaml, None) {
        return Err(invalid(Path::new("the suggested policy"), &errors));
    }
    write_out(args.output.as_deref(), &text)
}

fn write_out(output: Option<&Path>, text: &str) -> Result<Exit, Failure> {
    let Some(path) = output else {
        print!("{text}");
        return Ok(Exit::Ok);
    };
    std::fs::write(path, text)
        .map(|()| Exit::Ok)
        .map_err(|e| Failure::new(Exit::Usage, format!("leash policy suggest: cannot write `{}`: {e}", path.display())))
}

/// How one host was met in the logs (requests only; lookups are not counted).
#[derive(Debug, Default, Clone)]
struct HostUse {
    requests: usize,
    /// Requests that make the host needed: allowed, inspected, or `would-block` for a reason an entry may lift.
    used: usize,
    would_block: BTreeMap<String, usize>,
    refused: BTreeMap<String, usize>,
    /// Ask mode: requests a person allowed, by answer (`once`, `run`, `always`).
    approved: BTreeMap<String, usize>,
}

impl HostUse {
    fn merge(&mut self, other: &HostUse) {
        self.requests += other.requests;
        self.used += other.used;
        for (reason, n) in &other.would_block {
            *self.would_block.entry(reason.clone()).or_default() += n;
        }
        for (reason, n) in &other.refused {
            *self.refused.entry(reason.clone()).or_default() += n;
        }
        for (answer, n) in &other.approved {
            *self.approved.entry(answer.clone()).or_default() += n;
        }
    }

    /// `12 requests, 3 let through that the rules would refuse (would-block: not-allowed), 1 refused (port)`: audit
    /// mode refused nothing of the first kind, and says so.
    fn describe(&self) -> String {
        let mut text = counted(self.requests, "request", "requests");
        let would = "let through that the rules would refuse (would-block: ";
        for (counts, what) in [(&self.would_block, would), (&self.refused, "refused (")] {
            let n: usize = counts.values().sum();
            if n > 0 {
                let reasons: Vec<&str> = counts.keys().map(String::as_str).collect();
                let _ = write!(text, ", {n} {what}{})", reasons.join(", "));
            }
        }
        if !self.approved.is_empty() {
            let answers: Vec<String> = self.approved.iter().map(|(answer, n)| format!("{answer} {n}")).collect();
            let _ = write!(text, ", approved by a person during the run ({})", answers.join(", "));
            if self.approved.contains_key("always") {
                text.push_str(", already in the policy file");
            }
        }
        text
    }
}

/// What the logs show was used and refused, in the terms a policy is written in.
#[derive(Debug, Default)]
struct Usage {
    files: usize,
    requests: usize,
    lookups: usize,
    /// Every host named by a request, by its canonical text; hosts that are not names are kept here too.
    hosts: BTreeMap<String, HostUse>,
    /// Plain-HTTP and CONNECT ports of the used requests, with how often.
    ports: BTreeMap<u16, usize>,
    tunnel_ports: BTreeMap<u16, usize>,
}

impl Usage {
    fn of(files: &[LogFile]) -> Usage {
        let mut usage = Usage { files: files.len(), ..Usage::default() };
        for file in files {
            let inspected = inspected_tunnels(file);
            for record in &file.records {
                usage.add(record, &inspected);
            }
        }
        usage
    }

    fn add(&mut self, record: &Record, inspected: &BTreeSet<(&str, u16)>) {
        if record.is_lookup() {
            self.lookups += 1;
            return;
        }
        // A service is its own gate, written in `services`: nothing for the proxy's rules to learn from.
        if record.is_service() {
            return;
        }
        self.requests += 1;
        let line = &record.line;
        let host = parse_host(&line.host).map(|h| h.to_string()).unwrap_or_else(|_| line.host.to_string());
        let entry = self.hosts.entry(host).or_default();
        entry.requests += 1;
        let reason = line.reason.as_str().to_owned();
        match line.decision {
            Verdict::Block => *entry.refused.entry(reason).or_default() += 1,
            Verdict::WouldBlock => *entry.would_block.entry(reason).or_default() += 1,
            Verdict::Allow if line.reason == Reason::Approved => {
                let answer = line.answer.as_deref().unwrap_or("unknown").to_owned();
                *entry.approved.entry(answer).or_default() += 1;
            }
            Verdict::Allow | Verdict::Inspect => {}
        }
        if !makes_needed(record) {
            return;
        }
        entry.used += 1;
        if record.is_tunnel() {
            *self.tunnel_ports.entry(line.port).or_default() += 1;
        } else if !inspected.contains(&(&*line.host, line.port)) {
            *self.ports.entry(line.port).or_default() += 1;
        }
    }

    /// Names needed, and names only ever refused (never a host the logs show used).
    fn names(&self) -> (BTreeMap<&str, &HostUse>, BTreeMap<&str, &HostUse>) {
        self.hosts
            .iter()
            .filter(|(host, _)| matches!(parse_host(host), Ok(Host::Name(_))))
            .map(|(host, u)| (host.as_str(), u))
            .partition(|(_, u)| u.used > 0)
    }

    /// Dotted-quad addresses that were allowed: a policy listed them, in exactly that spelling.
    fn used_addresses(&self) -> impl Iterator<Item = (&str, &HostUse)> {
        self.hosts
            .iter()
            .filter(|(host, u)| u.used > 0 && matches!(parse_host(host), Ok(Host::Ipv4(_))))
            .map(|(host, u)| (host.as_str(), u))
    }

    /// Hosts whose requests were refused, or would have been, as IP literals or internal destinations and that are
    /// not otherwise needed: the comment that says they are left out on purpose.
    fn never_allowed(&self) -> Vec<(&str, String)> {
        self.hosts
            .iter()
            .filter(|(_, u)| u.used == 0)
            .filter(|(_, u)| {
                u.refused.keys().chain(u.would_block.keys()).any(|r| NEVER_ALLOW.iter().any(|n| n.as_str() == r))
            })
            .map(|(host, u)| (host.as_str(), u.describe()))
            .collect()
    }

    /// Hosts a person refused when asked (`denied`) and that are not otherwise needed.
    fn denied_by_a_person(&self) -> Vec<(&str, String)> {
        let denied = Reason::Denied.as_str();
        self.hosts
            .iter()
            .filter(|(_, u)| u.used == 0 && u.refused.contains_key(denied))
            .map(|(host, u)| (host.as_str(), u.describe()))
            .collect()
    }

    fn header(&self, what: &str) -> String {
        let mut text = format!(
            "# Suggested by `leash policy suggest` from {} ({}): {what}.\n# Review it before use.\n",
            counted(self.files, "audit log", "audit logs"),
            counted(self.requests, "request", "requests"),
        );
        if self.lookups > 0 {
            let _ = writeln!(
                text,
                "# {} by the DNS stub left out: a name only looked up, never requested, needs no entry.",
                counted(self.lookups, "lookup", "lookups")
            );
        }
        let denied = self.denied_by_a_person();
        if !denied.is_empty() {
            text.push_str("# Refused by a person during the run (ask mode), so not suggested:\n");
            for (host, described) in denied {
                let _ = writeln!(text, "#   {host}: {described}");
            }
        }
        let never = self.never_allowed();
        if !never.is_empty() {
            text.push_str(
                "# Never allowed here: IP literals and names that resolved to internal addresses stay refused whatever\n\
                 # the policy lists (reasons ip-literal, internal-destination):\n",
            );
            for (host, described) in never {
                let _ = writeln!(text, "#   {host}: {described}");
            }
        }
        text
    }
}

/// A request that the suggested policy must let through: allowed or inspected (an IP literal only if a policy listed
/// it, which is how it came to be allowed), or `would-block` on a name for a reason other than [`NEVER_ALLOW`].
fn makes_needed(record: &Record) -> bool {
    match (record.line.decision, parse_host(&record.line.host)) {
        (Verdict::Allow | Verdict::Inspect, Ok(Host::Name(_) | Host::Ipv4(_))) => true,
        (Verdict::WouldBlock, Ok(Host::Name(_))) => !NEVER_ALLOW.contains(&record.line.reason),
        _ => false,
    }
}

/// `(host, port)` of every inspected tunnel: the requests inside one are on its port, but are not plain HTTP and
/// need no entry in `ports`.
fn inspected_tunnels(file: &LogFile) -> BTreeSet<(&str, u16)> {
    file.records
        .iter()
        .filter(|r| r.is_tunnel() && r.line.decision == Verdict::Inspect)
        .map(|r| (&*r.line.host, r.line.port))
        .collect()
}

/// One line of a host list: the entry and its comment.
struct Entry {
    text: String,
    comment: String,
}

fn allowlist(usage: &Usage) -> String {
    let (used, refused_only) = usage.names();
    let (mut entries, notes) = fold(&used, &refused_only);
    entries.extend(usage.used_addresses().map(|(host, u)| Entry { text: host.to_owned(), comment: u.describe() }));
    let mut text = usage.header("an allowlist of every host used");
    for note in notes {
        let _ = writeln!(text, "# {note}");
    }
    text.push_str("network:\n  mode: allowlist\n");
    text.push_str(&host_list("allowed_hosts", &entries));
    text.push_str(&refused_candidates(&refused_only));
    text.push_str(&port_lists(usage));
    text
}

/// Hosts a log (not in audit mode) shows refused by the rules alone (`not-allowed`, `rule`, or in ask mode
/// `ask-timeout`: held, and nobody answered), as commented entries below the list: a run that failed for want of them
/// is what a person reviewing the suggestion most needs to see, and dropping them silently hid it. Uncommenting one
/// allows it; reasons no entry can lift are left out, and so are hosts a person refused (`denied`).
fn refused_candidates(refused_only: &BTreeMap<&str, &HostUse>) -> String {
    let liftable = |u: &HostUse| {
        !u.refused.contains_key(Reason::Denied.as_str())
            && u.refused.keys().any(|r| r == "not-allowed" || r == "rule" || r == Reason::AskTimeout.as_str())
    };
    let candidates: Vec<(&str, String)> =
        refused_only.iter().filter(|(_, u)| liftable(u)).map(|(host, u)| (*host, u.describe())).collect();
    if candidates.is_empty() {
        return String::new();
    }
    let mut text = "    # Refused in these logs and left out; uncomment a host the run should reach:\n".to_owned();
    for (host, described) in candidates {
        let _ = writeln!(text, "    # - {}  # {described}", yaml_scalar(host));
    }
    text
}

/// Exact entries, with two or more subdomains of one registrable domain folded into `.domain` — unless a name under
/// that domain was only ever refused, which the fold would allow. Returns the entries and notes on folds not made.
fn fold(used: &BTreeMap<&str, &HostUse>, refused_only: &BTreeMap<&str, &HostUse>) -> (Vec<Entry>, Vec<String>) {
    let mut by_domain: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for &name in used.keys() {
        by_domain.entry(registrable_domain(name).unwrap_or(name)).or_default().push(name);
    }
    let (mut entries, mut notes) = (Vec::new(), Vec::new());
    for (domain, names) in by_domain {
        let below = names.iter().filter(|n| is_below(n, domain)).count();
        let spoilers: Vec<&str> =
            refused_only.keys().copied().filter(|r| *r == domain || is_below(r, domain)).collect();
        if below >= 2 && spoilers.is_empty() {
            entries.push(folded_entry(domain, &names, used));
            continue;
        }
        if below >= 2 {
            notes.push(format!(
                "not folded into .{domain}: it would also allow {}, only ever refused",
                spoilers.join(", ")
            ));
        }
        entries.extend(
            names.iter().filter_map(|n| Some(Entry { text: (*n).to_owned(), comment: used.get(n)?.describe() })),
        );
    }
    (entries, notes)
}

fn folded_entry(domain: &str, names: &[&str], used: &BTreeMap<&str, &HostUse>) -> Entry {
    let mut total = HostUse::default();
    let mut each = Vec::new();
    for name in names {
        if let Some(u) = used.get(name) {
            total.merge(u);
            each.push(format!("{name} {}", u.requests));
        }
    }
    Entry { text: format!(".{domain}"), comment: format!("{}: {}", total.describe(), each.join(", ")) }
}

/// The registrable domain of `name` by the public-suffix list (`a.foo.co.uk` → `foo.co.uk`; `x.github.io` is one
/// itself, as `github.io` is a public suffix). A name under an unlisted top-level domain (`svc.corp`) is read by the
/// list's default rule: its last label is the suffix.
fn registrable_domain(name: &str) -> Option<&str> {
    psl::domain_str(name)
}

/// `name` is a strict subdomain of `domain`.
fn is_below(name: &str, domain: &str) -> bool {
    name.strip_suffix(domain).is_some_and(|rest| rest.ends_with('.'))
}

fn blocklist(usage: &Usage) -> String {
    let (used, refused_only) = usage.names();
    let mut entries = Vec::new();
    let mut notes = Vec::new();
    for (&name, u) in &refused_only {
        // A blocked_urls host covers its subdomains too: blocking it must not cut off a host that was used.
        let cut_off: Vec<&str> = used.keys().copied().filter(|h| is_below(h, name)).collect();
        if cut_off.is_empty() {
            entries.push(Entry { text: name.to_owned(), comment: u.describe() });
        } else {
            notes.push(format!(
                "not blocked: {name} ({}), as that would block {} under it",
                u.describe(),
                cut_off.join(", ")
            ));
        }
    }
    let addresses: Vec<&str> = usage.used_addresses().map(|(host, _)| host).collect();
    if !addresses.is_empty() {
        notes.push(format!(
            "{} used, but a blocklist refuses every IP literal: {}",
            addresses.len(),
            addresses.join(", ")
        ));
    }
    let mut text = usage.header("a blocklist of the hosts only ever refused");
    let _ = writeln!(
        text,
        "# Every other host stays reachable, the {} used here among them.",
        counted(used.len(), "host", "hosts")
    );
    for note in notes {
        let _ = writeln!(text, "# {note}");
    }
    text.push_str("network:\n  mode: blocklist\n");
    text.push_str(&host_list("blocked_urls", &entries));
    text.push_str(&port_lists(usage));
    text
}

/// `  KEY:` and one `- entry  # comment` line per entry, the comments aligned; `KEY: []` when there is none.
fn host_list(key: &str, entries: &[Entry]) -> String {
    if entries.is_empty() {
        return format!("  {key}: []\n");
    }
    let shown: Vec<String> = entries.iter().map(|e| yaml_scalar(&e.text)).collect();
    let width = shown.iter().map(String::len).max().unwrap_or(0);
    let mut text = format!("  {key}:\n");
    for (entry, shown) in entries.iter().zip(&shown) {
        let _ = writeln!(text, "    - {shown:<width$}  # {}", entry.comment);
    }
    text
}

/// `ports` and `tunnel_ports`, each only when a request used a port beyond the defaults (which are kept).
fn port_lists(usage: &Usage) -> String {
    let mut text = String::new();
    for (key, defaults, used, what) in [
        ("ports", &DEFAULT_PORTS[..], &usage.ports, ("request", "requests")),
        ("tunnel_ports", &DEFAULT_TUNNEL_PORTS[..], &usage.tunnel_ports, ("tunnel", "tunnels")),
    ] {
        let extra: Vec<String> = used
            .iter()
            .filter(|(port, _)| !defaults.contains(port))
            .map(|(port, n)| format!("{port}: {}", counted(*n, what.0, what.1)))
            .collect();
        if extra.is_empty() {
            continue;
        }
        let all: BTreeSet<u16> = defaults.iter().chain(used.keys()).copied().collect();
        let list: Vec<String> = all.iter().map(u16::to_string).collect();
        let _ = writeln!(text, "  {key}: [{}]  # {}", list.join(", "), extra.join("; "));
    }
    text
}

/// A host as a YAML scalar: plain where YAML's core schema reads it as a string, double-quoted where it would read
/// `null`, `true`, a number or `.inf` instead (hosts hold only letters, digits, `-` and `.`, so quotes need no
/// escaping).
fn yaml_scalar(host: &str) -> String {
    let lower = host.to_ascii_lowercase();
    let bare = lower.trim_start_matches('.');
    let not_a_string = matches!(lower.as_str(), "null" | "true" | "false" | "~")
        || lower.parse::<f64>().is_ok()
        || bare.parse::<f64>().is_ok()
        || matches!(bare, "inf" | "nan")
        || lower.starts_with("0x")
        || lower.starts_with("0o");
    if not_a_string {
        format!("\"{host}\"")
    } else {
        host.to_owned()
    }
}

fn counted(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shared::audit_read::from_lines;

    /// A CONNECT decision line of ask mode: `decision`, `reason` and `answer` as the proxy writes them.
    fn asked(id: u64, host: &str, decision: &str, reason: &str, answer: &str) -> String {
        format!(
            r#"{{"id":{id},"method":"CONNECT","host":"{host}","port":443,"path":null,"decision":"{decision}","rule":null,"reason":"{reason}","decided_by":"terminal","answer":"{answer}","waited_ms":900.0}}"#
        )
    }

    fn ask_run_log() -> LogFile {
        let lines = [
            r#"{"id":1,"method":"CONNECT","host":"pypi.org","port":443,"path":null,"decision":"allow","rule":"pypi.org","reason":"rule"}"#.to_owned(),
            asked(2, "api.example.com", "allow", "approved", "run"),
            asked(3, "api.example.com", "allow", "approved", "run"),
            asked(4, "docs.example.org", "allow", "approved", "always"),
            asked(5, "once.example.net", "allow", "approved", "once"),
            asked(6, "evil.example.net", "block", "denied", "deny"),
            asked(7, "slow.example.io", "block", "ask-timeout", "timeout"),
        ];
        from_lines(&lines.iter().map(String::as_str).collect::<Vec<_>>())
    }

    fn entry_line<'t>(text: &'t str, host: &str) -> Option<&'t str> {
        text.lines().find(|l| l.trim_start().starts_with(&format!("- {host} ")))
    }

    #[test]
    fn hosts_a_person_approved_are_suggested_and_say_so() {
        let text = allowlist(&Usage::of(&[ask_run_log()]));
        let line = entry_line(&text, "api.example.com").unwrap_or_else(|| panic!("{text}"));
        assert!(line.ends_with("# 2 requests, approved by a person during the run (run 2)"), "{line}");
        let line = entry_line(&text, "once.example.net").unwrap();
        assert!(line.contains("approved by a person during the run (once 1)"), "{line}");
        // An `always` answer wrote the host into the policy file already: the comment says so.
        let line = entry_line(&text, "docs.example.org").unwrap();
        assert!(line.ends_with("approved by a person during the run (always 1), already in the policy file"), "{line}");
        let loaded = load(&text, Format::Yaml, None).unwrap();
        let allows = |host: &str| {
            let host = parse_host(host).unwrap();
            let question = leash_policy::Question::Connect { target: &host, port: 443 };
            loaded.policy.decide(&question, leash_policy::TlsInspection::Available).verdict == Verdict::Allow
        };
        assert!(allows("api.example.com") && allows("docs.example.org") && allows("pypi.org"));
        assert!(!allows("evil.example.net") && !allows("slow.example.io"));
    }

    #[test]
    fn a_host_a_person_denied_is_listed_as_such_and_one_nobody_answered_is_offered_commented_out() {
        let text = allowlist(&Usage::of(&[ask_run_log()]));
        assert!(
            text.contains("# Refused by a person during the run (ask mode), so not suggested:\n#   evil.example.net: 1 request, 1 refused (denied)\n"),
            "{text}"
        );
        assert!(!text.lines().any(|l| l.contains("- evil.example.net")), "{text}");
        assert!(text.contains("    # - slow.example.io  # 1 request, 1 refused (ask-timeout)\n"), "{text}");
        // The one approved name under example.net is not widened to the domain the denied host is in.
        assert!(!text.contains("- .example.net"), "{text}");
    }

    #[test]
    fn registrable_domains_come_from_the_public_suffix_list() {
        assert_eq!(registrable_domain("a.foo.co.uk"), Some("foo.co.uk"));
        assert_eq!(registrable_domain("x.github.io"), Some("x.github.io"));
        assert_eq!(registrable_domain("x.svc.corp"), Some("svc.corp"), "the default rule for an unlisted suffix");
        assert!(is_below("a.foo.co.uk", "foo.co.uk"));
        assert!(!is_below("afoo.co.uk", "foo.co.uk") && !is_below("foo.co.uk", "foo.co.uk"));
    }

    #[test]
    fn hosts_yaml_would_read_as_something_else_are_quoted() {
        for (host, shown) in [
            ("null", "\"null\""),
            (".inf", "\".inf\""),
            ("1e3", "\"1e3\""),
            ("a.b", "a.b"),
            (".foo.co.uk", ".foo.co.uk"),
        ] {
            assert_eq!(yaml_scalar(host), shown);
        }
        let policy = format!(
            "network:\n  mode: allowlist\n  allowed_hosts:\n    - {}\n    - {}\n",
            yaml_scalar("null"),
            yaml_scalar(".inf")
        );
        assert!(load(&policy, Format::Yaml, None).is_ok(), "{policy}");
    }
}
