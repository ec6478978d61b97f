//! Ask mode where the policy inspects (`inspect: all`): the tunnel to a host not allowed is opened to leash alone
//! and each request inside is asked with its method and path, before anything is dialled.

use std::path::Path;
use std::process::Command;

use crate::common::{https_material_for, log_lines, sandbox_available, Served};
use crate::scene::{ask_policy, path, Scene};

/// An HTTPS origin for `new.test` (the leaf made in `dir`) answering `origin-tls PATH`, which appends a line to
/// `dir/accepts` for every connection it accepts, before any TLS: what was dialled, whatever came of it.
fn counting_origin(dir: &Path) -> (Served, u16) {
    let script = r#"
import http.server, ssl
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        body = ("origin-tls " + self.path).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
class Counting(http.server.ThreadingHTTPServer):
    def get_request(self):
        sock, addr = self.socket.accept()
        with open("accepts", "a") as f:
            f.write("accepted\n")
        return ctx.wrap_socket(sock, server_side=True), addr
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain("leaf.pem", "leaf.key")
srv = Counting(("127.0.0.1", 0), H)
print(srv.server_address[1], flush=True)
srv.serve_forever()
"#;
    Served::start(Command::new("python3").args(["-c", script]).current_dir(dir))
}

fn accepts(dir: &Path) -> usize {
    std::fs::read_to_string(dir.join("accepts")).unwrap_or_default().lines().count()
}

#[test]
fn a_request_inside_an_inspected_tunnel_is_asked_with_its_path_and_nothing_is_dialled_before_the_answer() {
    if !sandbox_available() {
        return;
    }
    let certs = tempfile::tempdir().unwrap();
    let upstream_ca = https_material_for(certs.path(), &["new.test"]);
    let (_origin, port) = counting_origin(certs.path());
    let scene = Scene::with_origin(port, |p| ask_policy(&[80], &format!("  tunnel_ports: [{p}]\n  inspect: all\n")));
    let url = format!("https://new.test:{port}/secret/path?q=1");
    let run = scene.run(&["--upstream-ca", path(&upstream_ca)], &format!("get '{url}'"));
    let question = scene.question("new.test", 1);
    let shown = (question["kind"].as_str(), question["method"].as_str(), question["path"].as_str());
    assert_eq!(shown, (Some("request"), Some("GET"), Some("/secret/path?q=1")), "{question}");
    assert_eq!(accepts(certs.path()), 0, "the origin was dialled before the answer");
    scene.answer(&question, "run", None);
    let ended = run.finish();
    let got = ended.got(&url);
    assert_eq!((got.status, got.body.as_str()), (200, "origin-tls /secret/path?q=1"), "{}", ended.stderr);
    assert_eq!(accepts(certs.path()), 1);
    let lines = log_lines(&scene.log);
    let opened = lines.iter().find(|l| l["method"] == "CONNECT").unwrap_or_else(|| panic!("{lines:#?}"));
    assert_eq!((opened["decision"].as_str(), opened["reason"].as_str()), (Some("inspect"), Some("ask")), "{opened}");
    let line = scene.decision("/secret/path");
    let ruled = (line["reason"].as_str(), line["decided_by"].as_str(), line["answer"].as_str());
    assert_eq!(ruled, (Some("approved"), Some("socket"), Some("run")), "{line}");
}
