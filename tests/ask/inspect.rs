//! Ask mode where the policy inspects (`inspect: all`): the tunnel to a host not allowed is opened to leash alone
//! and each request inside is asked with its method and path, before anything is dialled.

use crate::common::{https_material_for, log_lines, sandbox_available, HttpsOrigin};
use crate::scene::{ask_policy, path, Scene};

#[test]
fn a_request_inside_an_inspected_tunnel_is_asked_with_its_path_and_nothing_is_dialled_before_the_answer() {
    if !sandbox_available() {
        return;
    }
    let certs = tempfile::tempdir().unwrap();
    let upstream_ca = https_material_for(certs.path(), &["new.test"]);
    let origin = HttpsOrigin::start(certs.path());
    let port = origin.port;
    let scene = Scene::with_origin(port, |p| ask_policy(&[80], &format!("  tunnel_ports: [{p}]\n  inspect: all\n")));
    let url = format!("https://new.test:{port}/secret/path?q=1");
    let run = scene.run(&["--upstream-ca", path(&upstream_ca)], &format!("get '{url}'"));
    let question = scene.question("new.test", 1);
    let shown = (question["kind"].as_str(), question["method"].as_str(), question["path"].as_str());
    assert_eq!(shown, (Some("request"), Some("GET"), Some("/secret/path?q=1")), "{question}");
    assert_eq!(origin.accepts(), 0, "the origin was dialled before the answer");
    scene.answer(&question, "run", None);
    let ended = run.finish();
    let got = ended.got(&url);
    assert_eq!((got.status, got.body.as_str()), (200, "origin-tls /secret/path?q=1"), "{}", ended.stderr);
    assert_eq!(origin.accepts(), 1);
    let lines = log_lines(&scene.log);
    let opened = lines.iter().find(|l| l["method"] == "CONNECT").unwrap_or_else(|| panic!("{lines:#?}"));
    assert_eq!((opened["decision"].as_str(), opened["reason"].as_str()), (Some("inspect"), Some("ask")), "{opened}");
    let line = scene.decision("/secret/path");
    let ruled = (line["reason"].as_str(), line["decided_by"].as_str(), line["answer"].as_str());
    assert_eq!(ruled, (Some("approved"), Some("socket"), Some("run")), "{line}");
}
