//! A real guest on the switch: QEMU (TCG: these machines' /dev/kvm cannot run guests) boots
//! Debian's cloud kernel with a busybox initramfs (`tests/guest/build.sh`) and a virtio-net
//! device on a tap with its vnet header on, so the guest keeps its offloads (TSO, checksum
//! offload) and hands the switch super-frames with partial checksums. The port is added through
//! the API before QEMU makes the tap, and attaches when the tap appears. The guest reaches the
//! remote host through the switch and moves 16 MiB each way over TCP, checked byte for byte
//! (SHA-256 at both ends). Topology: [`netns`].

mod netns;
use netns::*;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Kills QEMU and the remote side's servers when the test ends, however it ends.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The remote host's side: takes what arrives on port 5001 (its SHA-256 and length go to
/// `DIR/in`), sends 16 MiB of random bytes on port 5002 (their SHA-256 goes to `DIR/out`).
const REMOTE: &str = r#"
import hashlib, os, socket, sys, threading
d = sys.argv[1]
data = os.urandom(16 << 20)
open(os.path.join(d, "out"), "w").write(hashlib.sha256(data).hexdigest())
def listener(port):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("10.77.0.100", port))
    s.listen(1)
    return s
a, b = listener(5001), listener(5002)
def take():
    c, _ = a.accept()
    h, n = hashlib.sha256(), 0
    while True:
        x = c.recv(1 << 16)
        if not x:
            break
        h.update(x)
        n += len(x)
    open(os.path.join(d, "in"), "w").write("%s %d" % (h.hexdigest(), n))
def give():
    c, _ = b.accept()
    c.sendall(data)
    c.close()
t = [threading.Thread(target=f) for f in (take, give)]
[x.start() for x in t]
[x.join() for x in t]
"#;

/// The guest's kernel and initramfs, built (or found) in target/guest.
fn guest_image() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let dir = root.join("target/guest");
    let ok = Command::new(root.join("tests/guest/build.sh"))
        .arg(&dir)
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "tests/guest/build.sh could not build the guest");
    dir
}

#[test]
fn a_qemu_guest_moves_data_both_ways_through_the_switch_with_its_offloads_on() {
    let _one_at_a_time = netns::lock();
    let qemu = sh(&["sh", "-c", "command -v qemu-system-x86_64 && command -v python3"]);
    if !ready()
        || !skip_unless(
            qemu && Path::new("/dev/net/tun").exists(),
            "qemu-system-x86_64, python3 and /dev/net/tun",
        )
    {
        return;
    }
    let image = guest_image();
    let _topology = Topology::up();
    sh(&["ip", "link", "del", "tmt-q0"]);
    let dir = tempfile::tempdir().unwrap();
    let vm1_only = {
        let all = api_switch();
        all[..all.rfind("[[ports]]").unwrap()].to_string()
    };
    let (mut daemon, status) = start(dir.path(), &vm1_only);
    let mac = "52:54:00:77:00:05";
    let (code, _, err) = ctl(
        dir.path(),
        &[
            "port",
            "add",
            "guest",
            "--interface",
            "tmt-q0",
            "--group",
            "vms",
            "--mac",
            mac,
        ],
    );
    assert_eq!(code, 0, "{err}");

    let remote = Killed(
        Command::new("timeout")
            .args(["180", "ip", "netns", "exec", "tmt-remote", "python3", "-c", REMOTE])
            .arg(dir.path())
            .spawn()
            .unwrap(),
    );
    await_listener("tmt-remote", 5002);
    let started = Instant::now();
    let qemu = Killed(
        Command::new("timeout")
            .arg("170")
            .arg("qemu-system-x86_64")
            .args(["-accel", "tcg", "-cpu", "max", "-m", "256", "-smp", "1"])
            .args(["-display", "none", "-serial", "stdio", "-no-reboot", "-nodefaults"])
            .arg("-kernel")
            .arg(image.join("vmlinuz"))
            .arg("-initrd")
            .arg(image.join("initrd.cpio.gz"))
            .args([
                "-append",
                "console=ttyS0 quiet panic=-1 guest_ip=10.77.0.5/24 peer=10.77.0.100",
            ])
            .args(["-netdev", "tap,id=n0,ifname=tmt-q0,script=no,downscript=no,vnet_hdr=on"])
            .args(["-device", &format!("virtio-net-pci,netdev=n0,mac={mac}")])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    // QEMU makes the tap; it comes up here, and the port attaches to it.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !sh(&["ip", "link", "set", "tmt-q0", "up"]) {
        assert!(Instant::now() < deadline, "QEMU made no tap");
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = {
        let mut q = qemu;
        let child = std::mem::replace(&mut q.0, Command::new("true").spawn().unwrap());
        child.wait_with_output().unwrap()
    };
    let console = String::from_utf8_lossy(&out.stdout).to_string();
    let took = started.elapsed();
    drop(remote);
    println!("guest run {took:?}:\n{console}");
    assert!(
        console.contains(&format!("GUEST-UP {mac}")),
        "the guest booted with its NIC:\n{console}"
    );
    assert!(
        console.contains("GUEST-PING ok"),
        "the guest reached the remote host:\n{console}"
    );
    assert!(console.contains("GUEST-SENT ok"), "{console}");

    // Guest to remote: what arrived is the guest's payload.
    let payload = std::fs::read_to_string(image.join("payload.sha256")).unwrap();
    let arrived = std::fs::read_to_string(dir.path().join("in")).unwrap_or_default();
    assert_eq!(
        arrived,
        format!("{} {}", payload.trim(), 16 << 20),
        "guest to remote, intact"
    );
    // Remote to guest: what the guest received is what the remote host sent.
    let sent = std::fs::read_to_string(dir.path().join("out")).unwrap();
    assert!(
        console.contains(&format!("GUEST-RECV {} {}", sent.trim(), 16 << 20)),
        "remote to guest, intact: sent {sent}\n{console}"
    );

    // The guest's offloads were on, as virtio-net negotiated them with QEMU's tap (vnet header):
    // it may send partial checksums (VIRTIO_NET_F_CSUM, bit 0) and TSO super-frames
    // (HOST_TSO4, bit 11), and take them (GUEST_CSUM 1, GUEST_TSO4 7).
    let features = console
        .lines()
        .find_map(|l| l.strip_prefix("GUEST-FEATURES "))
        .unwrap_or_else(|| panic!("no features line:\n{console}"))
        .trim()
        .as_bytes()
        .to_vec();
    for (bit, what) in [(0, "CSUM"), (1, "GUEST_CSUM"), (7, "GUEST_TSO4"), (11, "HOST_TSO4")] {
        assert_eq!(features.get(bit), Some(&b'1'), "VIRTIO_NET_F_{what} off: {features:?}");
    }
    // Nothing of the guest's was dropped by the switch while it ran (frames sent to its port
    // before its tap attached are counted `detached`).
    std::thread::sleep(Duration::from_millis(1200));
    let s = netns::status(&status);
    let guest = s["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "guest")
        .unwrap();
    let c = &guest["counters"];
    let (rx_packets, rx_bytes) = (c["rx_packets"].as_u64().unwrap(), c["rx_bytes"].as_u64().unwrap());
    println!(
        "guest port: {} ({} B per frame received)",
        counters_line(&s),
        rx_bytes / rx_packets.max(1)
    );
    assert!(rx_bytes > 16 << 20, "{}", counters_line(&s));
    // The counters are read after the guest powered off: a frame or two sent to its tap as
    // QEMU closed it are `tx_error` (the device went away under the send); those are the only
    // others allowed.
    for (why, n) in c["drops"].as_object().unwrap() {
        let n = n.as_u64().unwrap();
        let allowed = match why.as_str() {
            "detached" => u64::MAX,
            "tx_error" => 3,
            _ => 0,
        };
        assert!(n <= allowed, "{why} {n}: {}", counters_line(&s));
    }
    stop_cleanly(&mut daemon);
}
