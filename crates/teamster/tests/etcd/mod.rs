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
pub fn etcd(dir: &Path) -> (Killed, String) {
    let (client, peer) = (free_port(), free_port());
    let c = format!("http://127.0.0.1:{client}");
    let p = format!("http://127.0.0.1:{peer}");
    let child = Command::new("etcd")
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
