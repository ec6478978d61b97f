//! The prompt gate over real pseudo-terminals: one stands for the caller's terminal (the test types on its master
//! side and reads there what the person would see), one for the command's (the test writes the command's output on
//! its slave side and reads there what the command would read). Between them run the relays `attach` starts.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, FromRawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use super::{neutralise, Console, Prompter, LABEL, RESET, RUB_OUT, WITHDRAWN};
use crate::stdio::gate::{InputGate, OutputGate};
use crate::stdio::terminal;

/// How long any one thing may take before the test fails instead of hanging.
const WAIT: Duration = Duration::from_secs(10);

const QUESTION: &str = "allow GET http://x.example/y? [o]nce [r]un [a]lways [d]eny";

/// A pseudo-terminal: its master side, and its slave side made raw (bytes pass unchanged, no echo) when `raw`.
fn pty(raw: bool) -> (File, File) {
    let (mut master, mut slave) = (0, 0);
    // SAFETY: openpty writes two descriptors; the name, settings and size pointers may be null.
    let made =
        unsafe { libc::openpty(&mut master, &mut slave, std::ptr::null_mut(), std::ptr::null(), std::ptr::null()) };
    assert_eq!(made, 0, "openpty: {}", io::Error::last_os_error());
    // SAFETY: both descriptors were just opened, and are owned here only.
    let (master, slave) = unsafe { (File::from_raw_fd(master), File::from_raw_fd(slave)) };
    if raw {
        terminal::make_raw(slave.as_fd(), terminal::settings(slave.as_fd()).unwrap()).unwrap();
    }
    (master, slave)
}

/// Everything a thread reads from a descriptor, as it comes.
#[derive(Clone)]
struct Collected(Arc<(Mutex<Vec<u8>>, Condvar)>);

impl Collected {
    fn reading(mut from: File) -> Collected {
        let collected = Collected(Arc::default());
        let shared = collected.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n @ 1..) = from.read(&mut buf) {
                shared.0 .0.lock().unwrap().extend_from_slice(&buf[..n]);
                shared.0 .1.notify_all();
            }
        });
        collected
    }

    fn bytes(&self) -> Vec<u8> {
        self.0 .0.lock().unwrap().clone()
    }

    /// Waits (at most `WAIT`) until `what` has been read, and returns everything read so far.
    fn wait_for(&self, what: &[u8]) -> Vec<u8> {
        let (bytes, changed) = &*self.0;
        let (bytes, timeout) =
            changed.wait_timeout_while(bytes.lock().unwrap(), WAIT, |b| find(b, what).is_none()).unwrap();
        assert!(!timeout.timed_out(), "{:?} never came; got {:?}", show(what), show(&bytes));
        bytes.clone()
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn show(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).escape_debug().to_string()
}

/// The caller's terminal and the command's, relayed through the gates, with a prompter on them.
struct Rig {
    /// Where the test types as the person.
    keyboard: File,
    /// What the caller's terminal shows.
    screen: Collected,
    /// Where the test writes as the command.
    command: File,
    /// What the command reads.
    command_reads: Collected,
    prompter: Prompter,
    /// How many questions `ask_and_type` has asked.
    asked: usize,
}

fn rig() -> Rig {
    let (caller_master, caller_slave) = pty(true);
    let (command_master, command_slave) = pty(true);
    let output = Arc::new(OutputGate::new(caller_slave.try_clone().unwrap()));
    let (input, wake) = InputGate::new().unwrap();
    let input = Arc::new(input);
    let (relay, from) = (Arc::clone(&output), command_master.try_clone().unwrap());
    std::thread::spawn(move || relay.relay(from));
    let relay = Arc::clone(&input);
    std::thread::spawn(move || relay.relay(caller_slave, command_master, wake));
    Rig {
        keyboard: caller_master.try_clone().unwrap(),
        screen: Collected::reading(caller_master),
        command: command_slave.try_clone().unwrap(),
        command_reads: Collected::reading(command_slave),
        prompter: Prompter::relayed(output, input),
        asked: 0,
    }
}

type Answer = mpsc::Receiver<io::Result<Option<String>>>;

/// Asks `question` from a thread of its own, as leash does, while `open` holds.
fn ask(prompter: &Prompter, question: &str, open: &Arc<AtomicBool>) -> Answer {
    let (prompter, question, open) = (prompter.clone(), question.to_string(), Arc::clone(open));
    let (answered, answer) = mpsc::channel();
    std::thread::spawn(move || answered.send(prompter.ask(&question, &|| open.load(Ordering::SeqCst))));
    answer
}

fn answer(answer: &Answer) -> Option<String> {
    answer.recv_timeout(WAIT).expect("the prompt never ended").unwrap()
}

/// How the question's line starts on the screen.
fn question_shown(question: &str) -> Vec<u8> {
    format!("{LABEL}{} ", neutralise(question)).into_bytes()
}

impl Rig {
    fn type_keys(&mut self, keys: &[u8]) {
        self.keyboard.write_all(keys).unwrap();
    }

    /// Asks `QUESTION`, waits until it shows, types `keys`, and returns the answer.
    fn ask_and_type(&mut self, keys: &[u8]) -> Option<String> {
        let pending = ask(&self.prompter, QUESTION, &Arc::new(AtomicBool::new(true)));
        self.asked += 1;
        wait_for_count(&self.screen, &question_shown(QUESTION), self.asked);
        self.type_keys(keys);
        answer(&pending)
    }
}

/// The command's output while it writes without pause: numbered items, so that a loss or a swap shows.
struct Chatter {
    stop: Arc<AtomicBool>,
    written: std::thread::JoinHandle<usize>,
}

fn item(i: usize) -> String {
    format!("<{i}>")
}

fn chatter(command: &File) -> Chatter {
    let (stop, mut command) = (Arc::new(AtomicBool::new(false)), command.try_clone().unwrap());
    let stopped = Arc::clone(&stop);
    let written = std::thread::spawn(move || {
        let mut next = 0;
        while !stopped.load(Ordering::SeqCst) {
            let batch: String = (next..next + 50).map(item).collect();
            command.write_all(batch.as_bytes()).unwrap();
            next += 50;
            std::thread::sleep(Duration::from_millis(1));
        }
        next
    });
    Chatter { stop, written }
}

/// Runs a prompt answered `o` while the command writes without pause; returns the screen and the item count.
fn prompt_over_chatter() -> (Vec<u8>, usize) {
    let mut rig = rig();
    let chatter = chatter(&rig.command);
    rig.screen.wait_for(&item(500).into_bytes());
    let pending = ask(&rig.prompter, QUESTION, &Arc::new(AtomicBool::new(true)));
    rig.screen.wait_for(&question_shown(QUESTION));
    // The command goes on writing meanwhile (and blocks once its terminal is full).
    std::thread::sleep(Duration::from_millis(200));
    rig.type_keys(b"o\r");
    assert_eq!(answer(&pending).as_deref(), Some("o"));
    std::thread::sleep(Duration::from_millis(100));
    chatter.stop.store(true, Ordering::SeqCst);
    let items = chatter.written.join().unwrap();
    (rig.screen.wait_for(item(items - 1).as_bytes()), items)
}

/// The question's whole line as the prompt in `prompt_over_chatter` shows it.
fn chatter_prompt_line() -> Vec<u8> {
    [RESET.as_bytes(), &question_shown(QUESTION), b"o\r\n"].concat()
}

#[test]
fn a_prompt_over_continuous_output_is_a_line_of_its_own() {
    let (screen, _) = prompt_over_chatter();
    let start = find(&screen, &question_shown(QUESTION)).unwrap();
    // From the reset before the label to the line break after the answer, nothing but the prompt: no command byte.
    let line = chatter_prompt_line();
    let from = start - RESET.len();
    assert_eq!(show(screen.get(from..from + line.len()).unwrap()), show(&line));
}

#[test]
fn the_commands_output_resumes_after_a_prompt_with_nothing_lost() {
    let (screen, items) = prompt_over_chatter();
    let line = chatter_prompt_line();
    let start = find(&screen, &line).expect("the prompt's line, whole");
    let output = [&screen[..start], &screen[start + line.len()..]].concat();
    let written: String = (0..items).map(item).collect();
    assert!(output == written.as_bytes(), "the command's output arrived changed: {}", show(&output));
}

#[test]
fn keys_typed_during_a_prompt_never_reach_the_command_those_before_and_after_do() {
    let mut rig = rig();
    rig.type_keys(b"before ");
    rig.command_reads.wait_for(b"before ");
    assert_eq!(rig.ask_and_type(b"secret\r").as_deref(), Some("secret"));
    rig.type_keys(b"after");
    assert_eq!(show(&rig.command_reads.wait_for(b"after")), "before after");
    rig.screen.wait_for(&[question_shown(QUESTION), b"secret\r\n".to_vec()].concat());
}

#[test]
fn backspace_and_ctrl_u_edit_the_answer() {
    let mut rig = rig();
    assert_eq!(rig.ask_and_type(b"ab\x7f\x08once\x15r\r").as_deref(), Some("r"));
    let echoed = [b"ab".as_slice(), RUB_OUT, RUB_OUT, b"once", &RUB_OUT.repeat(4), b"r\r\n"].concat();
    rig.screen.wait_for(&[question_shown(QUESTION), echoed].concat());
}

#[test]
fn ctrl_c_or_esc_dismisses_and_an_arrow_key_or_a_terminals_reply_does_not() {
    let mut rig = rig();
    assert_eq!(rig.ask_and_type(b"o\x03"), None);
    assert_eq!(rig.ask_and_type(b"\x1b"), None);
    assert_eq!(rig.ask_and_type(b"\x1b[Ao\r").as_deref(), Some("o"));
    // A colour and a title reported back (the command asked), BEL- and ST-ended: neither dismisses nor types.
    let replies = b"\x1b]11;rgb:0000/0000/0000\x07\x1b]lr\x1b\\\x1bP1$r0m\x1b\\d\r";
    assert_eq!(rig.ask_and_type(replies).as_deref(), Some("d"));
    rig.type_keys(b"z");
    let read = rig.command_reads.wait_for(b"z");
    assert_eq!(show(&read), r"\u{3}z", "of the prompts' keys only the Ctrl-C reached the command");
}

#[test]
fn a_stream_of_questions_takes_no_ctrl_c_ctrl_backslash_or_ctrl_z_from_the_command() {
    let mut rig = rig();
    // One question after another, as a command asking for host after host keeps them coming: each signal key the
    // person types ends the question it meets and reaches the command, with nothing typed before it.
    for key in [b"o\x03", b"r\x1c", b"d\x1a", b"a\x03"] {
        assert_eq!(rig.ask_and_type(key), None);
    }
    assert_eq!(show(&rig.command_reads.wait_for(b"\x1a\x03")), r"\u{3}\u{1c}\u{1a}\u{3}");
}

#[test]
fn a_question_no_longer_asked_ends_within_300_ms() {
    let rig = rig();
    let open = Arc::new(AtomicBool::new(true));
    let pending = ask(&rig.prompter, QUESTION, &open);
    rig.screen.wait_for(&question_shown(QUESTION));
    let withdrawn = Instant::now();
    open.store(false, Ordering::SeqCst);
    assert_eq!(answer(&pending), None);
    let took = withdrawn.elapsed();
    assert!(took < Duration::from_millis(300), "the prompt stayed {took:?}");
    rig.screen.wait_for(&[question_shown(QUESTION), WITHDRAWN.to_vec()].concat());
}

#[test]
fn escape_sequences_in_a_host_name_are_shown_neutralised() {
    let mut rig = rig();
    let question = "allow GET http://a\x1b]0;owned\x07\x1b[2J\u{9b}31m.example/\u{202e}x? [o]nce";
    let pending = ask(&rig.prompter, question, &Arc::new(AtomicBool::new(true)));
    let shown = r"http://a\u{1b}]0;owned\u{7}\u{1b}[2J\u{9b}31m.example/\u{202e}x? [o]nce";
    rig.screen.wait_for(shown.as_bytes());
    rig.type_keys(b"\x03");
    assert_eq!(answer(&pending), None);
    let screen = rig.screen.bytes();
    let escapes = |bytes: &[u8]| bytes.iter().filter(|b| **b == 0x1b).count();
    let own = escapes(LABEL.as_bytes()) + escapes(RESET.as_bytes());
    assert_eq!(escapes(&screen), own, "only the reset's and the label's own: {}", show(&screen));
    assert!(screen.iter().all(|b| *b != 0x07 && *b < 0x80), "no bell, no C1 control: {}", show(&screen));
}

#[test]
fn questions_from_many_threads_take_turns() {
    let mut rig = rig();
    let open = Arc::new(AtomicBool::new(true));
    let answers: Vec<Answer> = (0..3).map(|_| ask(&rig.prompter, QUESTION, &open)).collect();
    for (asked, keys) in [b"o\r", b"r\r", b"d\r"].into_iter().enumerate() {
        wait_for_count(&rig.screen, &question_shown(QUESTION), asked + 1);
        rig.type_keys(keys);
    }
    let mut got: Vec<_> = answers.iter().map(|a| answer(a).unwrap()).collect();
    got.sort();
    assert_eq!(got, ["d", "o", "r"]);
}

/// Waits (at most `WAIT`) until `what` has shown `count` times.
fn wait_for_count(screen: &Collected, what: &[u8], count: usize) {
    let deadline = Instant::now() + WAIT;
    while screen.bytes().windows(what.len()).filter(|w| *w == what).count() < count {
        assert!(Instant::now() < deadline, "{count} questions never showed: {}", show(&screen.bytes()));
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_direct_prompt_makes_the_terminal_raw_only_while_asking_and_ignores_type_ahead() {
    let (mut master, slave) = pty(false);
    let screen = Collected::reading(master.try_clone().unwrap());
    let before = terminal::settings(slave.as_fd()).unwrap();
    // Typed before the question (echoed once the terminal has it): not an answer to it.
    master.write_all(b"a\r").unwrap();
    screen.wait_for(b"a\r\n");
    let output = Arc::new(OutputGate::new(slave.try_clone().unwrap()));
    let prompter = Prompter::with(Console::Direct { input: slave.as_fd().try_clone_to_owned().unwrap(), output });
    let open = Arc::new(AtomicBool::new(true));
    let pending = ask(&prompter, QUESTION, &open);
    screen.wait_for(&question_shown(QUESTION));
    let Console::Direct { input, .. } = &prompter.shared.terminal else { unreachable!() };
    let during = terminal::settings(input.as_fd()).unwrap();
    assert_eq!(during.c_lflag & (libc::ICANON | libc::ECHO), 0, "raw while asking");
    master.write_all(b"d\r").unwrap();
    assert_eq!(answer(&pending).as_deref(), Some("d"));
    let after = terminal::settings(input.as_fd()).unwrap();
    let flags = |t: libc::termios| (t.c_iflag, t.c_oflag, t.c_lflag, t.c_cflag);
    assert_eq!(flags(after), flags(before), "the terminal's settings put back");
}

#[test]
fn what_the_command_wrote_just_before_a_question_shows_before_it() {
    // Many rounds, each racing the relay: the output is written, and the question asked, at once.
    for round in 0..50 {
        let mut rig = rig();
        // The relays run (as they do from `attach` on, long before any question).
        rig.command.write_all(b"ready\r\n").unwrap();
        rig.screen.wait_for(b"ready\r\n");
        let before = format!("before-{round}\r\n");
        rig.command.write_all(before.as_bytes()).unwrap();
        let shown = rig.ask_and_type(b"o\r");
        assert_eq!(shown.as_deref(), Some("o"));
        let screen = rig.screen.wait_for(before.as_bytes());
        let (written, asked) = (find(&screen, before.as_bytes()), find(&screen, &question_shown(QUESTION)));
        assert!(written < asked, "round {round}: the question came before the output: {}", show(&screen));
    }
}

#[test]
fn what_acts_on_the_operators_machine_never_reaches_the_callers_terminal() {
    let mut rig = rig();
    // The clipboard written and read, tmux's passthrough, kitty's graphics reading a file, a title report.
    let hostile = b"\x1b]52;c;cHduZWQ=\x07\x1b]52;c;?\x1b\\\x1bPtmux;\x1b\x1b]52;c;eA==\x07\x1b\\\x1b_Ga=T,t=f;L2V0Yw==\x1b\\\x1b[21t";
    for piece in hostile.chunks(7) {
        rig.command.write_all(piece).unwrap();
    }
    rig.command.write_all(b"\x1b[1mvisible\x1b[0m\r\n").unwrap();
    let screen = rig.screen.wait_for(b"visible\x1b[0m\r\n");
    assert_eq!(show(&screen), show(b"\x1b\\\x1b[1mvisible\x1b[0m\r\n"));
}

#[test]
fn leashs_own_lines_wait_for_a_question_and_a_flood_is_counted_not_kept() {
    let mut rig = rig();
    let Console::Relayed { output, .. } = &rig.prompter.shared.terminal else { unreachable!() };
    let output = Arc::clone(output);
    output.write_own(b"before\n");
    rig.screen.wait_for(b"before\r\n");
    let pending = ask(&rig.prompter, QUESTION, &Arc::new(AtomicBool::new(true)));
    rig.screen.wait_for(&question_shown(QUESTION));
    // A hundred lines of 1 KiB (a warning each, as a command can make leash write): none shows while asking.
    let line = [vec![b'x'; 1023], b"\n".to_vec()].concat();
    (0..100).for_each(|_| output.write_own(&line));
    assert!(find(&rig.screen.bytes(), b"xxxx").is_none(), "a line of leash's in the question");
    rig.type_keys(b"o\r");
    assert_eq!(answer(&pending).as_deref(), Some("o"));
    let screen = rig.screen.wait_for(b"dropped while a question was up\r\n");
    // After the answer, what fit, each line ending in CR LF, then how much did not.
    let after = &screen[find(&screen, b"o\r\n").unwrap() + 3..];
    let shown = [vec![b'x'; 1023], b"\r\n".to_vec()].concat();
    let kept = super::super::gate::OWN_HELD_MAX / shown.len();
    let dropped = format!("leash: {} bytes of leash's own messages dropped", (100 - kept) * shown.len());
    assert_eq!(show(&after[..kept * shown.len()]), show(&shown.repeat(kept)));
    assert!(after[kept * shown.len()..].starts_with(dropped.as_bytes()), "{}", show(&after[kept * shown.len()..]));
}
