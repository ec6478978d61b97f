//! Questions answered over the control socket with `leash ask`, while curl inside `leash run` waits: each answer's
//! effect on the held request and on the requests after it, what the audit log and `leash ask list` say.

use std::process::{Command, Stdio};

use crate::common::{sandbox_available, stderr};
use crate::scene::{path, until, Scene, LEASH};

/// The audit line's ask fields: `(decision, reason, decided_by, answer)`.
fn ruling(line: &serde_json::Value) -> (&str, &str, &str, &str) {
    let text = |k: &str| line[k].as_str().unwrap_or("-");
    (text("decision"), text("reason"), text("decided_by"), text("answer"))
}

fn waited_ms(line: &serde_json::Value) -> f64 {
    line["waited_ms"].as_f64().unwrap_or_else(|| panic!("no waited_ms: {line}"))
}

#[test]
fn once_lets_the_waiting_request_through_and_the_next_request_is_asked_again() {
    if !sandbox_available() {
        return;
    }
    let scene = Scene::new("");
    let (one, two) = (scene.url("new.test", "/one?q=1"), scene.url("new.test", "/two"));
    let run = scene.run(&[], &format!("get {one}; get {two}"));
    let first = scene.question("new.test", 1);
    assert_eq!((first["method"].as_str(), first["path"].as_str()), (Some("GET"), Some("/one?q=1")), "{first}");
    assert_eq!((first["kind"].as_str(), first["port"].as_u64()), (Some("request"), Some(u64::from(scene.port))));
    scene.answer(&first, "once", None);
    let second = until("the second question", || scene.pending().into_iter().find(|q| q["path"] == "/two"));
    assert_ne!(first["id"], second["id"], "a new question");
    scene.answer(&second, "once", None);
    let ended = run.finish();
    for url in [&one, &two] {
        let got = ended.got(url);
        assert_eq!((got.status, got.body.as_str()), (200, "origin"), "{url}");
    }
    // The log keeps the path without its query.
    for path in ["/one", "/two"] {
        let line = scene.decision(path);
        assert_eq!(ruling(&line), ("allow", "approved", "socket", "once"), "{line}");
        assert!(waited_ms(&line) > 0.0, "{line}");
    }
    assert!(scene.pending().is_empty());
}

#[test]
fn run_lets_later_requests_go_unasked_and_a_domain_scope_covers_a_sibling_host() {
    if !sandbox_available() {
        return;
    }
    let scene = Scene::new("");
    let urls = [scene.url("a.new.test", "/1"), scene.url("b.new.test", "/2"), scene.url("a.new.test", "/3")];
    let run = scene.run(&[], &format!("get {}; get {}; get {}", urls[0], urls[1], urls[2]));
    until("the control socket", || scene.socket.exists().then_some(()));
    let mut watch = Command::new(LEASH)
        .args(["ask", "watch", "--socket", path(&scene.socket)])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let question = scene.question("a.new.test", 1);
    let refused = scene.try_answer(&question, "run", Some(".other.test"));
    assert!(!refused.status.success() && stderr(&refused).contains("does not cover"), "{}", stderr(&refused));
    scene.answer(&question, "run", Some(".new.test"));
    let ended = run.finish();
    for url in &urls {
        assert_eq!(ended.got(url).status, 200, "{url}: {}", ended.stdout);
    }
    for (path, waited) in [("/1", true), ("/2", false), ("/3", false)] {
        let line = scene.decision(path);
        assert_eq!(ruling(&line), ("allow", "approved", "socket", "run"), "{line}");
        assert_eq!(waited_ms(&line) > 0.0, waited, "only the first waited: {line}");
    }
    // The watcher (ended with leash) saw one question in all (pending when it began, or asked since), and its answer.
    let watched = until("leash ask watch to end with leash", || watch.try_wait().unwrap());
    assert!(watched.success());
    let mut text = String::new();
    std::io::Read::read_to_string(&mut watch.stdout.take().unwrap(), &mut text).unwrap();
    let lines: Vec<serde_json::Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let listed = lines[0]["pending"].as_array().map_or(0, Vec::len);
    let asked = lines.iter().filter(|l| l["event"] == "asked").count();
    assert_eq!(listed + asked, 1, "{text}");
    let settled: Vec<_> = lines.iter().filter(|l| l["event"] == "settled").collect();
    assert_eq!(settled.len(), 1, "{text}");
    assert_eq!((settled[0]["answer"].as_str(), settled[0]["by"].as_str()), (Some("run"), Some("socket")));
    assert!(ended.stderr.contains("approved in this run") && ended.stderr.contains(".new.test"), "{}", ended.stderr);
}

#[test]
fn deny_refuses_the_request_and_later_ones_without_a_new_question() {
    if !sandbox_available() {
        return;
    }
    let scene = Scene::new("");
    let (one, two) = (scene.url("new.test", "/one"), scene.url("new.test", "/two"));
    let run = scene.run(&[], &format!("get {one}; get {two}"));
    let question = scene.question("new.test", 1);
    scene.answer(&question, "deny", None);
    let ended = run.finish();
    for url in [&one, &two] {
        let got = ended.got(url);
        assert_eq!((got.status, got.reason.as_str()), (403, "denied"), "{url}");
        assert!(got.body.contains("denied"), "the body says why: {}", got.body);
    }
    let first = scene.decision("/one");
    assert_eq!(ruling(&first), ("block", "denied", "socket", "deny"), "{first}");
    assert!(waited_ms(&first) > 0.0);
    let second = scene.decision("/two");
    assert_eq!(ruling(&second), ("block", "denied", "socket", "deny"), "{second}");
    assert_eq!(waited_ms(&second), 0.0, "refused without a question: {second}");
}

#[test]
fn a_question_nobody_answers_is_refused_after_the_ask_timeout_and_the_host_stays_refused() {
    if !sandbox_available() {
        return;
    }
    let scene = Scene::new("");
    let (one, two) = (scene.url("new.test", "/one"), scene.url("new.test", "/two"));
    let run = scene.run(&["--ask-timeout", "1"], &format!("get {one}; get {two}"));
    let ended = run.finish();
    let (first, second) = (ended.got(&one), ended.got(&two));
    assert_eq!((first.status, first.reason.as_str()), (403, "ask-timeout"), "{}", ended.stderr);
    assert!((0.9..10.0).contains(&first.secs), "refused after about a second: {}", first.secs);
    assert_eq!((second.status, second.reason.as_str()), (403, "ask-timeout"));
    assert!(second.secs < 0.9, "refused at once, not asked again: {}", second.secs);
    let line = scene.decision("/one");
    assert_eq!(ruling(&line), ("block", "ask-timeout", "timeout", "timeout"), "{line}");
    assert!(waited_ms(&line) >= 900.0, "{line}");
    assert_eq!(ruling(&scene.decision("/two")), ("block", "ask-timeout", "timeout", "timeout"));
}

#[test]
fn concurrent_requests_to_one_host_share_one_question_and_one_answer_releases_them_all() {
    if !sandbox_available() {
        return;
    }
    let scene = Scene::new("");
    let urls: Vec<String> = (1..=5).map(|i| scene.url("new.test", &format!("/{i}"))).collect();
    let script: String = urls.iter().map(|u| format!("get {u} & ")).collect::<String>() + "wait";
    let run = scene.run(&[], &script);
    let question = scene.question("new.test", 5);
    assert_eq!(scene.pending().len(), 1, "one question for the five");
    scene.answer(&question, "once", None);
    let ended = run.finish();
    for url in &urls {
        assert_eq!(ended.got(url).status, 200, "{url}");
    }
    let lines = scene.decisions();
    assert_eq!(lines.len(), 5, "{lines:#?}");
    assert!(lines.iter().all(|l| ruling(l) == ("allow", "approved", "socket", "once")), "{lines:#?}");
}

#[test]
fn list_shows_each_open_question_as_json_and_as_a_table() {
    if !sandbox_available() {
        return;
    }
    let scene = Scene::new("");
    let (a, b) = (scene.url("a.new.test", "/a?x=1"), scene.url("b.new.test", "/b"));
    let run = scene.run(&[], &format!("get {a} & get {b} & wait"));
    scene.question("a.new.test", 1);
    scene.question("b.new.test", 1);
    let pending = scene.pending();
    assert_eq!(pending.len(), 2, "{pending:#?}");
    for q in &pending {
        for key in ["id", "kind", "method", "host", "port", "path", "asked_at", "waiting"] {
            assert!(q.get(key).is_some(), "{key} in {q}");
        }
    }
    let table = String::from_utf8(scene.ask(&["list"]).stdout).unwrap();
    assert!(table.contains(&format!("GET a.new.test:{}/a?x=1", scene.port)), "{table}");
    assert!(table.contains("1 waiting"), "{table}");
    for q in &pending {
        scene.answer(q, "deny", None);
    }
    run.finish();
    let table = String::from_utf8(scene.ask(&["list"]).stdout).unwrap_or_default();
    assert!(!table.contains("GET"), "leash has ended: {table}");
}

#[test]
fn always_adds_the_host_to_the_policy_file_keeping_its_comments_and_later_requests_match_the_rule() {
    if !sandbox_available() {
        return;
    }
    let scene = Scene::with_origin(crate::common::origin(), |port| {
        format!(
            "# The agent's policy.\nnetwork:\n  mode: ask  # ask about the rest\n  # Hosts it may reach:\n  allowed_hosts:\n    - ok.test  # its own API\n  ports: [80, {port}]\n  allow_destinations: [127.0.0.1/32]  # the origin\n"
        )
    });
    let before = std::fs::read_to_string(&scene.policy).unwrap();
    let (one, two) = (scene.url("new.test", "/one"), scene.url("new.test", "/two"));
    let run = scene.run(&[], &format!("get {one}; get {two}"));
    let question = scene.question("new.test", 1);
    let explain = |policy: &std::path::Path| {
        let url = format!("http://new.test:{}/", scene.port);
        Command::new(LEASH).args(["explain", "--policy", path(policy), &url]).output().unwrap()
    };
    assert!(!explain(&scene.policy).status.success(), "the file does not allow new.test yet");
    scene.answer(&question, "always", None);
    let ended = run.finish();
    assert_eq!(ended.got(&one).status, 200);
    assert_eq!(ended.got(&two).status, 200);
    let after = std::fs::read_to_string(&scene.policy).unwrap();
    for comment in before.lines().filter_map(|l| l.find('#').map(|at| &l[at..])) {
        assert!(after.contains(comment), "`{comment}` kept:\n{after}");
    }
    let check = Command::new(LEASH).args(["check", path(&scene.policy)]).output().unwrap();
    assert!(check.status.success(), "leash check: {}", stderr(&check));
    let explained = explain(&scene.policy);
    assert!(explained.status.success(), "the file allows new.test now: {}", crate::common::stdout(&explained));
    assert_eq!(ruling(&scene.decision("/one")), ("allow", "approved", "socket", "always"));
    let later = scene.decision("/two");
    assert_eq!((later["decision"].as_str(), later["reason"].as_str()), (Some("allow"), Some("rule")), "{later}");
    assert!(later.get("answer").is_none(), "decided by the reloaded policy, not the answer: {later}");
}

/// The class of issue 41's first finding: `always` read the policy again by its path, whose directory the command
/// owns. The command moves the policy's directory away and plants a policy allowing whole top-level domains at the
/// path, then asks. Whatever the command managed, `always` changes only the file leash read at start: the planted one
/// is neither loaded nor written, and nothing of it is allowed afterwards.
#[test]
fn always_changes_the_policy_leash_started_with_whatever_the_command_moved_or_planted() {
    if !sandbox_available() {
        return;
    }
    let scene = Scene::new("");
    let before = std::fs::read_to_string(&scene.policy).unwrap();
    let planted = "network:\n  mode: ask\n  allowed_hosts: [.com, .net, .org, .test]\n  ports: [80, 443]\n";
    // The scene's directory is the policy's, and the command's working directory.
    let script = format!(
        "d=$(pwd); if mv \"$d\" \"$d.moved\" 2>/dev/null; then echo MOVED; mkdir \"$d\"; else echo KEPT; fi\n\
         printf '{}' > \"$d/planted.yaml\" && mv -f \"$d/planted.yaml\" \"$d/policy.yaml\" 2>/dev/null || echo REPLACE-REFUSED\n\
         get {}",
        planted.replace('\n', "\\n"),
        scene.url("new.test", "/one")
    );
    let run = scene.run(&[], &script);
    let question = scene.question("new.test", 1);
    scene.answer(&question, "always", None);
    let ended = run.finish();
    let said = &ended.stdout;
    assert!(said.contains("KEPT") && said.contains("REPLACE-REFUSED"), "the directory and the file stay put: {said}");
    let moved = scene.dir.path().with_extension("moved");
    let leashs = if moved.exists() { moved.join("policy.yaml") } else { scene.policy.clone() };
    let after = std::fs::read_to_string(&leashs).unwrap();
    assert!(after.contains("new.test"), "the answer is in leash's own file:\n{after}");
    for line in before.lines().filter(|l| !l.trim().is_empty() && !l.contains("allowed_hosts")) {
        assert!(after.contains(line.trim()), "`{line}` kept:\n{after}");
    }
    assert!(!after.contains(".com"), "the planted policy was read and written back:\n{after}");
    let explain = |url: &str| {
        Command::new(LEASH).args(["explain", "--policy", path(&scene.policy), url]).output().unwrap().status.success()
    };
    assert!(explain("http://new.test/"), "the answer was written into the file leash read");
    assert!(!explain("http://anything.com/"), "nothing the command planted is allowed");
}

#[test]
fn always_without_a_policy_file_is_refused_and_the_question_stays_open() {
    if !sandbox_available() {
        return;
    }
    let scene = Scene::new("");
    // Port 80, which an inline policy allows; nothing listens there, and 127.0.0.1 is an internal destination to
    // it: the request is refused once allowed. What matters is the question.
    let url = "http://new.test/x";
    let args: Vec<String> = scene.leash_args(&[]).into_iter().collect();
    // The same run with an inline policy: `--allow` and `--ask`, no file to write into.
    let file_at = args.iter().position(|a| a == "--policy").unwrap();
    let mut inline = args.clone();
    inline.splice(file_at..file_at + 2, ["--allow".into(), "ok.test".into(), "--ask".into()]);
    let mut child = Command::new(LEASH)
        .args(&inline)
        .args(["sh", "-c", &format!("{}\nget {url}", Scene::prelude())])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let question = scene.question("new.test", 1);
    let refused = scene.try_answer(&question, "always", None);
    assert!(!refused.status.success() && stderr(&refused).contains("answer `run`"), "{}", stderr(&refused));
    assert_eq!(scene.pending().len(), 1, "still open");
    scene.answer(&question, "run", None);
    let status = until("leash run to end", || child.try_wait().unwrap());
    assert!(status.success());
}
