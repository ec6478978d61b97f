//! Ask mode's control socket (and `--control`'s, [`crate::shared::control`], bound the same way): a Unix socket in a directory of leash's own (mode 0700), which the sandbox cannot see
//! (the directory is hidden inside it, and the sandbox may connect to no Unix socket it was not given). One JSON
//! object per line each way ([`super::protocol`]); each connection is served in a task of its own.

use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use leash_proxy::ask::{Answer, AnsweredBy};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::broadcast::error::RecvError;

use super::protocol::{line, Notice, Reply, Request, MAX_LINE};
use super::AskFront;

/// The control socket, bound; its file (and the directory leash made for it) is removed when dropped.
pub struct Bound {
    listener: std::sync::Mutex<Option<std::os::unix::net::UnixListener>>,
    path: PathBuf,
    dir: PathBuf,
    /// Whether leash made `dir` (and removes it).
    made_dir: bool,
}

impl Bound {
    /// Bind `path`, in a directory that must be a real directory only its owner may enter (leash makes it 0700 when
    /// it is missing): a socket in a directory others can enter could be answered by them.
    pub fn bind(path: &Path) -> io::Result<Bound> {
        let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new(".")).to_path_buf();
        let made_dir = !dir.exists();
        if made_dir {
            std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&dir)?;
        }
        check_private(&dir)?;
        let listener = std::os::unix::net::UnixListener::bind(path)?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
        listener.set_nonblocking(true)?;
        Ok(Bound { listener: std::sync::Mutex::new(Some(listener)), path: path.to_path_buf(), dir, made_dir })
    }

    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The directory it is in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The listener, for whoever serves it (once: `None` after).
    pub fn take_listener(&self) -> Option<std::os::unix::net::UnixListener> {
        self.listener.lock().ok().and_then(|mut l| l.take())
    }

    /// Serve `front`'s socket on the current runtime until leash ends (spawned); once.
    pub fn serve(front: &Arc<AskFront>) -> io::Result<()> {
        let Some(listener) = front.socket.take_listener() else { return Ok(()) };
        let listener = UnixListener::from_std(listener)?;
        let front = front.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve_client(stream, front.clone()));
            }
        });
        Ok(())
    }
}

impl Drop for Bound {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
        if self.made_dir {
            let _ = std::fs::remove_dir(&self.dir);
        }
    }
}

/// `dir` is a directory (not a symlink), owned by this user, that no one else may enter or write.
fn check_private(dir: &Path) -> io::Result<()> {
    let meta = std::fs::symlink_metadata(dir)?;
    let uid = rustix::process::geteuid().as_raw();
    if !meta.is_dir() || meta.uid() != uid || meta.mode() & 0o077 != 0 {
        let why = format!("`{}` must be a directory of this user's that only it may enter (mode 0700)", dir.display());
        return Err(io::Error::new(io::ErrorKind::PermissionDenied, why));
    }
    Ok(())
}

/// Where the control socket goes without `--ask-socket`: `$XDG_RUNTIME_DIR/leash/ask-PID.sock`, else
/// `/run/leash/ask-PID.sock` for root, else `/tmp/leash-UID/ask-PID.sock`; the directory is made (0700) if it is
/// missing.
pub fn default_path() -> io::Result<PathBuf> {
    let dir = default_dir();
    if !dir.exists() {
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&dir)?;
    }
    Ok(dir.join(format!("ask-{}.sock", std::process::id())))
}

/// The directory default control sockets are in (`leash ask` looks there).
pub fn default_dir() -> PathBuf {
    default_dir_for(std::env::var_os("XDG_RUNTIME_DIR"), rustix::process::geteuid().as_raw())
}

/// [`default_dir`] for a runtime directory and a user. Root's is under `/run`, which `leash docker run` refuses to
/// bind (it holds the Docker socket; the directory itself is refused as leash's own), where a shared `/tmp` is a
/// common bind: a container that reached the socket would answer its own questions.
fn default_dir_for(runtime: Option<std::ffi::OsString>, euid: u32) -> PathBuf {
    match runtime.filter(|v| !v.is_empty()) {
        Some(runtime) => PathBuf::from(runtime).join("leash"),
        None if euid == 0 => PathBuf::from(ROOT_DIR),
        None => PathBuf::from(format!("/tmp/leash-{euid}")),
    }
}

/// Root's directory for control sockets without `XDG_RUNTIME_DIR`.
const ROOT_DIR: &str = "/run/leash";

/// Serve one client: a reply per request line; after `watch`, the events too.
async fn serve_client(stream: UnixStream, front: Arc<AskFront>) {
    let (read, mut write) = stream.into_split();
    let mut lines = BufReader::new(read).lines();
    let mut events = None;
    loop {
        let next = tokio::select! {
            line = lines.next_line() => Next::Line(line),
            event = recv(&mut events) => Next::Event(event),
        };
        let out = match next {
            Next::Line(Ok(Some(text))) if text.len() <= MAX_LINE => handle(&text, &front, &mut events),
            Next::Line(_) => return,
            Next::Event(Ok(event)) => line(&Notice::from(event)),
            Next::Event(Err(RecvError::Lagged(_))) => line(&Notice::Missed),
            Next::Event(Err(RecvError::Closed)) => return,
        };
        if write.write_all(out.as_bytes()).await.is_err() {
            return;
        }
    }
}

enum Next {
    Line(io::Result<Option<String>>),
    Event(Result<leash_proxy::ask::Event, RecvError>),
}

/// The next event for a watcher; never, for a client that does not watch.
async fn recv(
    events: &mut Option<tokio::sync::broadcast::Receiver<leash_proxy::ask::Event>>,
) -> Result<leash_proxy::ask::Event, RecvError> {
    match events {
        Some(receiver) => receiver.recv().await,
        None => std::future::pending().await,
    }
}

/// The reply to one request line.
fn handle(
    text: &str,
    front: &AskFront,
    events: &mut Option<tokio::sync::broadcast::Receiver<leash_proxy::ask::Event>>,
) -> String {
    let request = match serde_json::from_str::<Request>(text) {
        Ok(request) => request,
        Err(e) => return line(&Reply::failed(format!("not a request: {e}"))),
    };
    let reply = match request {
        Request::List => Reply::pending(front.asking.pending()),
        Request::Watch => {
            // Subscribed before listing: nothing falls between the list and the first event.
            *events = Some(front.asking.watch());
            Reply::pending(front.asking.pending())
        }
        Request::Answer { id, answer, scope } => match Answer::parse(&answer) {
            None => Reply::failed(format!("`{answer}` is no answer: once, run, always or deny")),
            Some(answer) => match front.answer(id, answer, scope.as_deref(), AnsweredBy::Socket) {
                Ok(()) => Reply::done(),
                Err(why) => Reply::failed(why),
            },
        },
    };
    line(&reply)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roots_default_control_socket_is_under_run_where_no_container_may_bind() {
        assert_eq!(default_dir_for(None, 0), Path::new("/run/leash"));
        assert_eq!(default_dir_for(Some("".into()), 0), Path::new("/run/leash"));
        assert_eq!(default_dir_for(Some("/run/user/0".into()), 0), Path::new("/run/user/0/leash"));
        assert_eq!(default_dir_for(None, 1000), Path::new("/tmp/leash-1000"));
        let parent = Path::new(ROOT_DIR).parent().and_then(Path::to_str).unwrap_or_default();
        assert!(leash_docker::options::reaches_runtime_socket(parent), "a bind of its parent is refused");
    }
}
