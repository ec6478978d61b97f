//! Ask mode at a terminal, as a person meets it: `leash run` on a pseudo-terminal (driven by Python's `pty`), the
//! question shown on it in leash's reverse-video label, the person's keystrokes answering it; and what the command
//! on that terminal cannot do: answer by writing to it, or read the question or the answer from it.

use std::process::Command;

use crate::common::sandbox_available;
use crate::scene::{Ended, Scene, LEASH, STEP};

/// What starts leash's own line on the terminal.
const LABEL: &str = "\x1b[1;7mleash:";

/// The person at the terminal: runs argv[3:] on a pseudo-terminal, and for each `[wait_for, type]` step waits until
/// `wait_for` shows (after what the previous step waited for) and then types `type`. Everything shown is written to
/// argv[1]; the exit code is the program's. argv[2] bounds the whole in seconds.
const PERSON: &str = r#"
import json, os, pty, select, sys, time
transcript, limit, steps, argv = sys.argv[1], float(sys.argv[2]), json.loads(sys.argv[3]), sys.argv[4:]
pid, fd = pty.fork()
if pid == 0:
    os.execvp(argv[0], argv)
deadline, seen, at = time.time() + limit, b"", 0
while time.time() < deadline:
    if steps:
        found = seen.find(steps[0][0].encode(), at)
        if found >= 0:
            at = found + len(steps[0][0])
            os.write(fd, steps.pop(0)[1].encode())
            continue
    if select.select([fd], [], [], 0.05)[0]:
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            break
        if not chunk:
            break
        seen += chunk
else:
    os.kill(pid, 9)
open(transcript, "wb").write(seen)
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status) if not steps else 99)
"#;

/// `leash run ARGS -- sh -c SCRIPT` on a terminal where a person follows `steps`; what the terminal showed.
fn at_terminal(scene: &Scene, args: &[&str], script: &str, steps: &[(&str, &str)]) -> (Ended, String) {
    let transcript = scene.dir.path().join("transcript");
    let steps = serde_json::to_string(steps).unwrap();
    let o = Command::new("python3")
        .current_dir(scene.dir.path())
        .args(["-c", PERSON, crate::scene::path(&transcript), &STEP.as_secs().to_string(), &steps, LEASH])
        .args(scene.leash_args(args))
        .args(["sh", "-c", &format!("{}\n{script}", Scene::prelude())])
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&std::fs::read(&transcript).unwrap()).into_owned();
    let stdout = shown.replace("\r\n", "\n");
    let ended = Ended { code: o.status.code(), stdout, stderr: String::from_utf8_lossy(&o.stderr).into_owned() };
    (ended, shown)
}

/// Where `what` first shows in `shown`, which it must.
fn at(shown: &str, what: &str) -> usize {
    shown.find(what).unwrap_or_else(|| panic!("{what:?} not on the terminal:\n{shown:?}"))
}

#[test]
fn the_person_at_the_terminal_answers_once_and_the_command_output_is_all_there() {
    if !sandbox_available() {
        return;
    }
    let scene = Scene::new("");
    let url = scene.url("new.test", "/x");
    let script = format!("echo before-the-request; get {url}; echo after-the-request");
    let (ended, shown) = at_terminal(&scene, &[], &script, &[(LABEL, "o\r")]);
    assert_eq!(ended.code, Some(0), "{shown:?}");
    let question = at(&shown, LABEL);
    let asked = &shown[question..];
    let named = format!("allow new.test:{} (GET /x)", scene.port);
    assert!(asked.contains(&named), "the question names the host first, then the request: {asked:?}");
    // What the command wrote before its request comes before the question (leash relays it first), what it wrote
    // after the answer comes after.
    assert!(at(&shown, "before-the-request") < question, "{shown:?}");
    assert!(question < at(&shown, "origin") && at(&shown, "origin") < at(&shown, "after-the-request"), "{shown:?}");
    assert_eq!(ended.got(&url).status, 200);
    let line = scene.decision("/x");
    assert_eq!((line["decided_by"].as_str(), line["answer"].as_str()), (Some("terminal"), Some("once")), "{line}");
}

#[test]
fn the_person_at_the_terminal_denies_and_the_command_is_refused() {
    if !sandbox_available() {
        return;
    }
    let scene = Scene::new("");
    let url = scene.url("new.test", "/x");
    let script = format!("echo before-the-request; get {url}; echo after-the-request");
    let (ended, shown) = at_terminal(&scene, &[], &script, &[(LABEL, "d\r")]);
    assert_eq!(ended.code, Some(0), "{shown:?}");
    let got = ended.got(&url);
    assert_eq!((got.status, got.reason.as_str()), (403, "denied"), "{shown:?}");
    at(&shown, "before-the-request");
    assert!(at(&shown, LABEL) < at(&shown, "after-the-request"), "{shown:?}");
    let line = scene.decision("/x");
    assert_eq!((line["decided_by"].as_str(), line["answer"].as_str()), (Some("terminal"), Some("deny")), "{line}");
}

#[test]
fn what_the_command_writes_to_its_terminal_never_answers_a_question() {
    if !sandbox_available() {
        return;
    }
    let scene = Scene::new("");
    let url = scene.url("new.test", "/x");
    // While the question is up the command "types" every answer it can think of: on its output, at its terminal,
    // and into its terminal's input queue (TIOCSTI, where the kernel still allows it). Nobody at the terminal does.
    let script = format!(
        r#"get {url} &
sleep 0.5
printf 'o\r\nr\r\na\r\n'
printf 'o\r\n' > /dev/tty
python3 -c 'import fcntl, termios
try:
    [fcntl.ioctl(0, termios.TIOCSTI, c) for c in b"o\r"]
except OSError as e:
    pass'
wait"#
    );
    let (ended, shown) = at_terminal(&scene, &["--ask-timeout", "2"], &script, &[]);
    assert!(shown.contains(LABEL), "the question was up: {shown:?}");
    let got = ended.got(&url);
    assert_eq!((got.status, got.reason.as_str()), (403, "ask-timeout"), "{shown:?}");
    let line = scene.decision("/x");
    assert_eq!((line["decided_by"].as_str(), line["answer"].as_str()), (Some("timeout"), Some("timeout")), "{line}");
}

#[test]
fn the_command_reads_neither_the_question_nor_the_answer_from_its_terminal() {
    if !sandbox_available() {
        return;
    }
    let scene = Scene::new("");
    let url = scene.url("new.test", "/x");
    // The command holds a question open with a background request and reads its terminal, raw, until it gets the
    // `z` the person types once the request is done (which shows the reading works). Raw at once, not after a flush
    // of what is pending: a `z` typed before the switch stays to be read.
    let script = format!(
        r#"(get {url}; echo request-done) &
python3 -c 'import os, select, sys, termios, time, tty
tty.setraw(0, termios.TCSANOW)
got, end = b"", time.time() + 20
while time.time() < end and b"z" not in got:
    if select.select([0], [], [], 0.05)[0]:
        got += os.read(0, 1024)
print("READ", got.hex())'
wait"#
    );
    let steps = [(LABEL, "o\r"), ("request-done", "z\r")];
    let (ended, shown) = at_terminal(&scene, &[], &script, &steps);
    assert_eq!(ended.got(&url).status, 200, "{shown:?}");
    let read = shown.split("READ ").nth(1).unwrap_or_else(|| panic!("the command's read: {shown:?}"));
    let hex = read.split_whitespace().next().unwrap();
    let bytes: Vec<u8> = (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap()).collect();
    assert!(bytes.starts_with(b"z"), "the command read only what was typed for it: {bytes:?}");
    let text = String::from_utf8_lossy(&bytes);
    assert!(!text.contains('o') && !text.contains("leash") && !text.contains("new.test"), "{text:?}");
}

#[test]
fn ctrl_c_typed_at_a_stream_of_questions_interrupts_the_command() {
    if !sandbox_available() {
        return;
    }
    let scene = Scene::new("");
    // Eight hosts asked about at once: a question is up whenever the person types. Their Ctrl-C is still theirs: it
    // reaches the command (the shell's trap), rather than dismissing one question for the next to take its place.
    let gets: String = (1..=8).map(|i| format!("get {} &\n", scene.url(&format!("h{i}.new.test"), "/x"))).collect();
    let script = format!("trap 'echo INTERRUPTED; exit 7' INT\n{gets}wait\necho not-interrupted");
    let started = std::time::Instant::now();
    let (ended, shown) = at_terminal(&scene, &["--ask-timeout", "60"], &script, &[(LABEL, "\x03")]);
    assert!(shown.contains("INTERRUPTED"), "{shown:?}");
    assert_eq!(ended.code, Some(7), "{shown:?}");
    // And leash ends with it: the questions still open are about a sandbox that is gone, and wait for nobody.
    let took = started.elapsed();
    assert!(took < std::time::Duration::from_secs(20), "leash outlived its command by {took:?}");
    let lines = scene.decisions();
    assert!(!lines.is_empty() && lines.iter().all(|l| l["reason"] == "ask-timeout"), "{lines:#?}");
}
