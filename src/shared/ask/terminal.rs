//! Ask mode at leash's terminal: one question at a time, in the order asked, each put to the person through a
//! [`Prompt`] (leash-sandbox's prompt gate on the command's terminal relay, or leash's own terminal for `leash proxy`),
//! until it is answered here, answered elsewhere (the control socket), or times out.

use std::io;
use std::sync::Arc;

use leash_proxy::ask::{Answer, AnsweredBy, Event, HeldKind, Question};
use tokio::sync::broadcast::error::RecvError;

use super::AskFront;

/// Something that can put a question to the person at the terminal and read the line they answer.
pub trait Prompt: Send + 'static {
    /// Show `question`, read one line; `None` when dismissed or once `still_open` turns false.
    fn ask(&self, question: &str, still_open: &dyn Fn() -> bool) -> io::Result<Option<String>>;
}

impl Prompt for leash_sandbox::Prompter {
    fn ask(&self, question: &str, still_open: &dyn Fn() -> bool) -> io::Result<Option<String>> {
        leash_sandbox::Prompter::ask(self, question, still_open)
    }
}

/// Put every question to the person through `prompt`, on a thread of its own, for as long as leash runs.
pub fn spawn(front: Arc<AskFront>, prompt: impl Prompt) -> io::Result<()> {
    // Subscribed before the thread starts, so no question falls between the two.
    let events = front.asking.watch();
    std::thread::Builder::new().name("leash-ask".into()).spawn(move || ask_each(&front, &prompt, events)).map(drop)
}

fn ask_each(front: &AskFront, prompt: &impl Prompt, mut events: tokio::sync::broadcast::Receiver<Event>) {
    for question in front.asking.pending() {
        if put(front, prompt, &question).is_err() {
            return;
        }
    }
    loop {
        let question = match events.blocking_recv() {
            Ok(Event::Asked(question)) => question,
            Ok(Event::Settled { .. }) => continue,
            Err(RecvError::Lagged(_)) => match front.asking.pending().into_iter().next() {
                Some(question) => question,
                None => continue,
            },
            Err(RecvError::Closed) => return,
        };
        if put(front, prompt, &question).is_err() {
            // The terminal is gone: the control socket and the timeout still answer.
            return;
        }
    }
}

/// Ask until the person gives an answer leash takes, dismisses the prompt, or the question closes elsewhere.
fn put(front: &AskFront, prompt: &impl Prompt, question: &Question) -> io::Result<()> {
    let still_open = || front.asking.is_open(question.id);
    let mut problem = String::new();
    while still_open() {
        // What was wrong with the last answer goes after the question: the host stays first.
        let last = format!("{problem}refused in {}s", front.asking.timeout().as_secs());
        let text = describe(question, &last);
        let Some(typed) = prompt.ask(&text, &still_open)? else { return Ok(()) };
        match parse(&typed) {
            Ok((answer, scope)) => match front.answer(question.id, answer, scope, AnsweredBy::Terminal) {
                Ok(()) => return Ok(()),
                Err(why) => problem = format!("{why}. "),
            },
            Err(why) => problem = format!("{why}. "),
        }
    }
    Ok(())
}

/// At most this many characters of a method are shown (then `...`): real ones are a word; the sandbox may send 400.
const METHOD_SHOWN: usize = 16;

/// At most this many characters of a path and query are shown (then `...`): enough to recognise it, short enough
/// that the question stays a line or two.
const PATH_SHOWN: usize = 80;

/// The question as the person reads it: the host first and whole (what an answer is about, never pushed away or cut),
/// then the method and path, each cut to a fixed length (the sandbox chose them: a 400-character method must not
/// push the host out of the line), and the answers. The method, host and path are the sandbox's words: anything but
/// printable ASCII in them is shown escaped, so no byte of theirs can move the cursor, clear a line or answer the
/// terminal. `last` ends the line before the prompt (what happens if nobody answers, here).
pub fn describe(q: &Question, last: &str) -> String {
    let target = format!("{}:{}", printable(&q.host), q.port);
    let what = match (q.kind, &q.path) {
        (HeldKind::Request, Some(path)) => {
            format!("{} {}", bounded(&printable(&q.method), METHOD_SHOWN), bounded(&printable(path), PATH_SHOWN))
        }
        _ => "a tunnel".to_owned(),
    };
    let also = match q.waiting {
        0 | 1 => String::new(),
        n => format!(", {n} requests wait"),
    };
    format!(
        "allow {target} ({what}{also})? [o]nce, [r]un, [a]lways (into the policy file), [d]eny; add .domain after \
         r/a/d for a whole domain; {last} > "
    )
}

/// `shown` (printable ASCII) cut to `max` characters, `...` marking the cut.
fn bounded(shown: &str, max: usize) -> String {
    match shown.get(..max) {
        Some(head) if shown.len() > max => format!("{head}..."),
        _ => shown.to_owned(),
    }
}

/// `text` with every character that is not printable ASCII written as `\u{..}`.
pub fn printable(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            ' '..='~' => out.push(c),
            other => out.push_str(&format!("\\u{{{:x}}}", u32::from(other))),
        }
    }
    out
}

/// `o`, `run`, `a .example.com`, ...: the answer and the scope typed.
pub fn parse(typed: &str) -> Result<(Answer, Option<&str>), String> {
    let mut words = typed.split_whitespace();
    let first = words.next().ok_or("type an answer")?;
    let answer = Answer::parse(&first.to_ascii_lowercase()).ok_or(format!("`{first}` is not o, r, a or d"))?;
    let scope = words.next();
    if words.next().is_some() {
        return Err("one answer and at most one .domain".to_owned());
    }
    if scope.is_some() && answer == Answer::Once {
        return Err("`once` takes no domain".to_owned());
    }
    Ok((answer, scope))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typed_answers_are_read_with_their_scope_and_nonsense_is_refused() {
        assert_eq!(parse(" o "), Ok((Answer::Once, None)));
        assert_eq!(parse("Run"), Ok((Answer::Run, None)));
        assert_eq!(parse("a .example.com"), Ok((Answer::Always, Some(".example.com"))));
        assert_eq!(parse("deny evil.test"), Ok((Answer::Deny, Some("evil.test"))));
        assert!(parse("").is_err());
        assert!(parse("yes").is_err());
        assert!(parse("o .example.com").is_err());
        assert!(parse("r a b").is_err());
    }

    #[test]
    fn a_question_shows_the_sandboxs_words_without_any_control_character() {
        let q = Question {
            id: 1,
            kind: HeldKind::Request,
            method: "GET".into(),
            host: "evil.test".into(),
            port: 80,
            path: Some("/x\u{1b}[2J\u{9b}31m\u{202e}".into()),
            asked_at: String::new(),
            waiting: 1,
        };
        let shown = describe(&q, "refused in 30s");
        assert!(shown.chars().all(|c| (' '..='~').contains(&c)), "{shown:?}");
        assert!(shown.starts_with("allow evil.test:80 (GET /x\\u{1b}[2J\\u{9b}31m\\u{202e})?"), "{shown}");
    }

    #[test]
    fn the_host_comes_first_and_whole_however_long_the_method_and_path() {
        let host = format!("{}.{}.registrable.example", "a".repeat(63), "b".repeat(63));
        let q = Question {
            id: 1,
            kind: HeldKind::Request,
            method: "M".repeat(400),
            host: host.clone(),
            port: 443,
            path: Some(format!("/{}", "p\u{1b}".repeat(400))),
            asked_at: String::new(),
            waiting: 3,
        };
        let shown = describe(&q, "refused in 30s");
        assert!(shown.starts_with(&format!("allow {host}:443 (")), "{shown}");
        // The sandbox's fields are cut to a fixed length, whatever they were.
        let fields = shown.split_once(" (").unwrap().1.split_once(")?").unwrap().0;
        assert_eq!(fields, format!("{}... /{}..., 3 requests wait", "M".repeat(16), &"p\\u{1b}".repeat(20)[..79]));
        // The prompt shows the first 400 characters of a question: the host is always among them.
        assert!(shown.find(&host).unwrap() + host.len() < 400, "{shown}");
        let tunnel = Question { kind: HeldKind::Tunnel, path: None, method: "CONNECT".into(), waiting: 1, ..q };
        assert!(describe(&tunnel, "x").starts_with(&format!("allow {host}:443 (a tunnel)? [o]nce")));
    }
}
