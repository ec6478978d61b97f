//! `leash ask`: a client of a running leash's control socket (ask mode). `list`, `answer` and `watch` each send one
//! request ([`crate::shared::ask::protocol`]); without a subcommand it watches and puts each new question to the
//! person at this terminal, as leash's own terminal prompt does.

use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

use leash_proxy::ask::Question;

use crate::cli::{AskClientArgs, AskCommand};
use crate::exit::{Exit, Failure};
use crate::shared::ask::protocol::{line, Notice, Reply, Request};
use crate::shared::ask::socket::default_dir;
use crate::shared::ask::terminal::{describe, parse, printable};

pub fn run(args: AskClientArgs) -> Result<Exit, Failure> {
    let socket = args
        .socket
        .or(args.socket_path)
        .map_or_else(only_socket, Ok)
        .map_err(|why| Failure::new(Exit::Usage, format!("leash ask: {why}")))?;
    let done = match args.command {
        Some(AskCommand::List { json }) => list(&socket, json),
        Some(AskCommand::Answer { id, answer, scope }) => return answer_one(&socket, id, answer, scope),
        Some(AskCommand::Watch) => watch(&socket),
        None => interactive(&socket),
    };
    done.map_err(|e| unreachable(&socket, &e))
}

/// The control socket could not be used.
fn unreachable(socket: &Path, e: &io::Error) -> Failure {
    Failure::new(Exit::Refused, format!("leash ask: {}: {e}", socket.display()))
}

/// The one control socket in the default directory; none or several is an error that says what to do.
fn only_socket() -> Result<PathBuf, String> {
    let dir = default_dir();
    let entries =
        std::fs::read_dir(&dir).map_err(|e| format!("no leash in ask mode found ({}: {e})", dir.display()))?;
    let mut sockets: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "sock") && UnixStream::connect(p).is_ok())
        .collect();
    match sockets.len() {
        1 => Ok(sockets.remove(0)),
        0 => Err(format!("no leash in ask mode is listening in {}; give --socket", dir.display())),
        _ => {
            let names: Vec<String> = sockets.iter().map(|p| p.display().to_string()).collect();
            Err(format!("several leash runs ask; give --socket with one of: {}", names.join(", ")))
        }
    }
}

/// One request and its reply.
fn request(socket: &Path, request: &Request) -> io::Result<Reply> {
    let mut stream = UnixStream::connect(socket)?;
    stream.write_all(line(request).as_bytes())?;
    let mut reply = String::new();
    BufReader::new(stream).read_line(&mut reply)?;
    serde_json::from_str(&reply).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

fn list(socket: &Path, json: bool) -> io::Result<Exit> {
    let reply = request(socket, &Request::List)?;
    let pending = reply.pending.unwrap_or_default();
    if json {
        println!("{}", serde_json::to_string_pretty(&pending).unwrap_or_default());
        return Ok(Exit::Ok);
    }
    if pending.is_empty() {
        println!("no question is waiting");
    }
    for q in &pending {
        println!("{}", row(q));
    }
    Ok(Exit::Ok)
}

/// `3  GET api.example.com:443/v1/x  (2 waiting, since 2026-12-04T20:01:02.123Z)`.
fn row(q: &Question) -> String {
    let what = match &q.path {
        Some(path) => format!("{} {}:{}{path}", q.method, q.host, q.port),
        None => format!("{} {}:{}", q.method, q.host, q.port),
    };
    format!("{:<4} {}  ({} waiting, since {})", q.id, printable(&what), q.waiting, printable(&q.asked_at))
}

fn answer_one(socket: &Path, id: u64, answer: String, scope: Option<String>) -> Result<Exit, Failure> {
    let reply = request(socket, &Request::Answer { id, answer, scope }).map_err(|e| unreachable(socket, &e))?;
    if reply.ok {
        return Ok(Exit::Ok);
    }
    Err(Failure::new(Exit::Refused, format!("leash ask: not answered: {}", reply.error.unwrap_or_default())))
}

/// Every event as a JSON line, until leash ends.
fn watch(socket: &Path) -> io::Result<Exit> {
    let mut stream = UnixStream::connect(socket)?;
    stream.write_all(line(&Request::Watch).as_bytes())?;
    let mut out = io::stdout().lock();
    for text in BufReader::new(stream).lines() {
        writeln!(out, "{}", text?)?;
        out.flush()?;
    }
    Ok(Exit::Ok)
}

/// Watch, and put each new question to the person here; answers go on a connection of their own.
fn interactive(socket: &Path) -> io::Result<Exit> {
    let mut stream = UnixStream::connect(socket)?;
    stream.write_all(line(&Request::Watch).as_bytes())?;
    let mut lines = BufReader::new(stream).lines();
    let first: Reply = serde_json::from_str(&lines.next().transpose()?.unwrap_or_default())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
    eprintln!("leash ask: watching {} (Ctrl-D or Ctrl-C to stop)", socket.display());
    for q in first.pending.unwrap_or_default() {
        put(socket, &q)?;
    }
    for text in lines {
        if let Ok(Notice::Asked { question }) = serde_json::from_str(&text?) {
            put(socket, &question)?;
        }
    }
    Ok(Exit::Ok)
}

/// Ask the person about `q` on stdin until leash takes an answer or they skip it (an empty line).
fn put(socket: &Path, q: &Question) -> io::Result<()> {
    loop {
        eprint!("leash: [{}] {}", q.id, describe(q, "an empty line skips it"));
        let mut typed = String::new();
        if io::stdin().read_line(&mut typed)? == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "standard input ended"));
        }
        if typed.trim().is_empty() {
            return Ok(());
        }
        let (answer, scope) = match parse(&typed) {
            Ok(parsed) => parsed,
            Err(why) => {
                eprintln!("leash: {why}");
                continue;
            }
        };
        let reply = request(
            socket,
            &Request::Answer { id: q.id, answer: answer.as_str().into(), scope: scope.map(Into::into) },
        )?;
        if reply.ok {
            return Ok(());
        }
        let why = reply.error.unwrap_or_default();
        eprintln!("leash: not answered: {why}");
        // Answered elsewhere meanwhile, or timed out: nothing more to say about it.
        if why.starts_with("no open question") {
            return Ok(());
        }
    }
}
