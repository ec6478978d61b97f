//! Ask mode on `leash proxy` (no sandbox): `--ask` turns an allowlist file into ask mode, questions are answered over
//! the control socket, and a SIGHUP reload keeps `--ask` for the file it loads again.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use crate::scene::{path, until, Scene, LEASH};

/// `leash proxy` on the scene's files with `--ask`, its policy an allowlist (ask mode from the flag alone).
struct Proxy {
    child: Child,
    addr: String,
}

impl Proxy {
    fn start(scene: &Scene) -> Proxy {
        let allowlist = std::fs::read_to_string(&scene.policy).unwrap().replace("mode: ask", "mode: allowlist");
        std::fs::write(&scene.policy, allowlist).unwrap();
        let mut child = Command::new(LEASH)
            .args(["proxy", "--ask", "--policy", path(&scene.policy), "--ask-socket", path(&scene.socket)])
            .args(["--listen", "127.0.0.1:0", "--log", path(&scene.log), "--resolve", "new.test:127.0.0.1"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(scene.dir.path().join("proxy.stderr")).unwrap())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let addr = line.trim().strip_prefix("listening on ").unwrap_or_else(|| panic!("{line:?}")).to_owned();
        Proxy { child, addr }
    }

    /// `curl -x PROXY URL` in the background: its status code, once it ends.
    fn get(&self, url: &str) -> std::thread::JoinHandle<String> {
        let (proxy, url) = (format!("http://{}", self.addr), url.to_owned());
        std::thread::spawn(move || {
            let o = Command::new("curl")
                .args(["-sS", "--max-time", "60", "-o", "/dev/null", "-w", "%{http_code}", "-x", &proxy, &url])
                .output()
                .unwrap();
            String::from_utf8_lossy(&o.stdout).into_owned()
        })
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn leash_proxy_asks_with_the_flag_and_keeps_asking_after_a_reload() {
    let scene = Scene::new("");
    let proxy = Proxy::start(&scene);
    let first = proxy.get(&scene.url("new.test", "/one"));
    let question = scene.question("new.test", 1);
    scene.answer(&question, "once", None);
    assert_eq!(first.join().unwrap(), "200");
    // Reloaded from the same allowlist file, the proxy still asks: the next request is held, not refused.
    let pid = proxy.child.id().to_string();
    assert!(Command::new("kill").args(["-HUP", &pid]).status().unwrap().success());
    let stderr = scene.dir.path().join("proxy.stderr");
    until("the reload", || std::fs::read_to_string(&stderr).unwrap().contains("reloaded the policy").then_some(()));
    let again = proxy.get(&scene.url("new.test", "/two"));
    let question = scene.question("new.test", 1);
    scene.answer(&question, "deny", None);
    assert_eq!(again.join().unwrap(), "403");
    let line = scene.decision("/two");
    assert_eq!((line["reason"].as_str(), line["decided_by"].as_str()), (Some("denied"), Some("socket")), "{line}");
}
