//! Ask mode from inside the sandbox: the command cannot reach the control socket; a held request holds up nothing
//! else; a lookup of the name a question is open about waits for the answer.

use crate::common::sandbox_available;
use crate::scene::{path, until, Scene};

#[test]
fn the_command_can_neither_see_nor_connect_to_the_control_socket() {
    if !sandbox_available() {
        return;
    }
    let scene = Scene::new("");
    let (dir, socket) = (path(scene.socket.parent().unwrap()), path(&scene.socket));
    let url = scene.url("new.test", "/x");
    // The command looks for the socket, then holds a question open: the socket is there and answers, outside.
    let script = format!(
        r#"echo "listing: $(ls -A {dir} 2>&1)"
stat {socket} >/dev/null 2>&1; echo "stat: $?"
python3 -c 'import socket, sys
s = socket.socket(socket.AF_UNIX)
try:
    s.connect(sys.argv[1]); s.sendall(b"{{\"op\":\"list\"}}\n"); print("connect: ok", s.recv(4096))
except OSError as e:
    print("connect: failed", e.errno)' {socket}
get {url}"#
    );
    let run = scene.run(&[], &script);
    let question = scene.question("new.test", 1);
    scene.answer(&question, "once", None);
    let ended = run.finish();
    let out = &ended.stdout;
    assert!(out.contains("listing: ") && !out.contains("s.sock"), "the directory shows no socket inside: {out}");
    assert!(out.contains("stat: 1"), "{out}");
    assert!(out.contains("connect: failed"), "{out}");
    assert_eq!(ended.got(&url).status, 200, "answered outside: {out}");
}

#[test]
fn a_held_request_does_not_slow_requests_to_allowed_hosts() {
    if !sandbox_available() {
        return;
    }
    let scene = Scene::new("");
    let (held, go) = (scene.url("new.test", "/held"), scene.dir.path().join("go"));
    // 50 requests to an allowed host, one curl each, once the test says the question is open; timed inside.
    let script = format!(
        r#"get {held} &
until [ -e {go} ]; do sleep 0.02; done
start=$(date +%s%N)
for i in $(seq 50); do curl -sS -o /dev/null -w '%{{http_code}}\n' http://ok.test:{port}/$i; done > codes
echo "loop: $(sort codes | uniq -c | xargs) in $(( ($(date +%s%N) - start) / 1000000 )) ms"
wait"#,
        go = path(&go),
        port = scene.port
    );
    let run = scene.run(&[], &script);
    let question = scene.question("new.test", 1);
    std::fs::write(&go, "").unwrap();
    let loop_line =
        until("the loop of 50 requests", || run.stdout().lines().find(|l| l.starts_with("loop:")).map(str::to_owned));
    // Still held all along: the same question, unanswered.
    assert_eq!(scene.question("new.test", 1)["id"], question["id"]);
    scene.answer(&question, "deny", None);
    let ended = run.finish();
    let words: Vec<&str> = loop_line.split_whitespace().collect();
    assert_eq!(words[1..3], ["50", "200"], "every request went through: {loop_line}");
    let ms: u64 = words[4].parse().unwrap();
    assert!(ms < 20_000, "50 requests took {ms} ms while one was held");
    assert_eq!(ended.got(&held).reason, "denied");
}

/// The script's lookup of `new.test` while a request to it is held, into the file `lookup`: `<address> <seconds>`, or
/// `failed <seconds> <errno>`. It touches `marker` just before.
fn lookup_while_held(scene: &Scene, marker: &std::path::Path) -> String {
    format!(
        r#"get {} &
sleep 0.3
touch {}
python3 -c 'import socket, time
t = time.time()
try:
    found = [socket.gethostbyname("new.test"), round(time.time() - t, 2)]
except OSError as e:
    found = ["failed", round(time.time() - t, 2), e.errno]
open("lookup", "w").write(" ".join(map(str, found)))'
wait"#,
        scene.url("new.test", "/x"),
        path(marker)
    )
}

/// How long the person takes to answer, after the lookup began: longer than the second a resolver gives a server
/// that is silent, so a lookup that did not wait on the question fails.
const PERSON_TAKES: std::time::Duration = std::time::Duration::from_millis(1500);

/// A lookup of `new.test` while the person takes [`PERSON_TAKES`] to answer `word`: what the script found and the
/// stub's audit line.
fn lookup_answered(word: &str) -> (Vec<String>, serde_json::Value) {
    let scene = Scene::new("");
    let marker = scene.dir.path().join("looking-up");
    let run = scene.run(&[], &lookup_while_held(&scene, &marker));
    let question = scene.question("new.test", 1);
    until("the lookup to begin", || marker.exists().then_some(()));
    std::thread::sleep(PERSON_TAKES);
    scene.answer(&question, word, None);
    let ended = run.finish();
    let found =
        std::fs::read_to_string(scene.dir.path().join("lookup")).unwrap_or_else(|e| panic!("{e}: {}", ended.stderr));
    let words = found.split_whitespace().map(str::to_owned).collect();
    let lines = crate::common::log_lines(&scene.log);
    let dns = lines.into_iter().find(|l| l["method"] == "DNS" && l["host"] == "new.test");
    (words, dns.unwrap_or_else(|| panic!("no lookup on record: {}", ended.stderr)))
}

#[test]
fn a_lookup_of_a_held_name_waits_for_the_answer_and_resolves_after_run() {
    if !sandbox_available() {
        return;
    }
    let (words, dns) = lookup_answered("run");
    assert_eq!(words[0], "127.0.0.2", "resolved to leash's transparent address: {words:?}");
    let secs: f64 = words[1].parse().unwrap();
    assert!(secs >= 1.0, "it waited for the answer: {words:?}");
    let ruled = (dns["reason"].as_str(), dns["decided_by"].as_str(), dns["answer"].as_str());
    assert_eq!(ruled, (Some("approved"), Some("socket"), Some("run")), "{dns}");
    assert!(dns["waited_ms"].as_f64().unwrap() >= 1000.0, "{dns}");
}

#[test]
fn a_lookup_of_a_held_name_fails_after_deny() {
    if !sandbox_available() {
        return;
    }
    let (words, dns) = lookup_answered("deny");
    // EAI_NONAME (-2): the name does not exist, as the stub answers a refused one; not EAI_AGAIN (-3), a resolver that
    // gave up waiting.
    assert_eq!((words[0].as_str(), words[2].as_str()), ("failed", "-2"), "{words:?}");
    assert!(words[1].parse::<f64>().unwrap() >= 1.0, "it waited for the answer: {words:?}");
    let ruled = (dns["reason"].as_str(), dns["decided_by"].as_str(), dns["answer"].as_str());
    assert_eq!(ruled, (Some("denied"), Some("socket"), Some("deny")), "{dns}");
}
