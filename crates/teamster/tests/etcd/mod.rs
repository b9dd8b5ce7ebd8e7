//! A single-member etcd for a test (Debian's etcd-server), on free loopback ports, and a child
//! process killed when dropped.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A child process killed when dropped.
pub struct Killed(pub Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// etcd on free loopback ports with its data in `dir`; its client URL.
#[allow(dead_code)] // not every test binary speaks plain HTTP to it
pub fn etcd(dir: &Path) -> (Killed, String) {
    start(dir, None)
}

/// etcd serving its clients over TLS only, with `cadir`'s `server-NAME.pem` and `.key` for
/// its certificate, requiring client certificates signed by `cadir`'s `ca.pem`; its https://
/// client URL.
#[allow(dead_code)] // not every test binary speaks TLS
pub fn etcd_tls(dir: &Path, cadir: &Path, name: &str) -> (Killed, String) {
    start(dir, Some((cadir, name)))
}

fn start(dir: &Path, tls: Option<(&Path, &str)>) -> (Killed, String) {
    let (client, peer) = (free_port(), free_port());
    let scheme = if tls.is_some() { "https" } else { "http" };
    let c = format!("{scheme}://127.0.0.1:{client}");
    let p = format!("http://127.0.0.1:{peer}");
    let mut command = Command::new("etcd");
    if let Some((cadir, name)) = tls {
        command
            .arg("--cert-file")
            .arg(cadir.join(format!("server-{name}.pem")))
            .arg("--key-file")
            .arg(cadir.join(format!("server-{name}.key")))
            .arg("--trusted-ca-file")
            .arg(cadir.join("ca.pem"))
            .arg("--client-cert-auth");
    }
    let child = command
        .args(["--name", "t", "--data-dir"])
        .arg(dir.join("etcd"))
        .args(["--listen-client-urls", &c, "--advertise-client-urls", &c])
        .args(["--listen-peer-urls", &p, "--initial-advertise-peer-urls", &p])
        .args(["--initial-cluster", &format!("t={p}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", client)).is_err() {
        assert!(Instant::now() < deadline, "etcd did not listen");
        std::thread::sleep(Duration::from_millis(50));
    }
    (Killed(child), c)
}
