//! Raw frames in a namespace, as an attacker's VM (or a physical switch) sends and sees them:
//! a packet socket on one interface, opened on a thread that entered the namespace, sending
//! frames built by hand and counting the frames that arrive.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

/// Runs `f` on a thread inside network namespace `ns` (setns affects only that thread).
pub fn in_netns<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> std::thread::JoinHandle<T> {
    let path = format!("/var/run/netns/{ns}");
    std::thread::spawn(move || {
        let file = std::fs::File::open(&path).unwrap_or_else(|e| panic!("open {path}: {e}"));
        // SAFETY: setns on a descriptor we hold open; it moves only this thread.
        let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(rc, 0, "setns {path}: {}", std::io::Error::last_os_error());
        f()
    })
}

/// A raw packet socket bound to `dev` in the calling thread's namespace (all protocols).
pub fn packet_socket(dev: &str) -> (OwnedFd, libc::sockaddr_ll) {
    let proto = (libc::ETH_P_ALL as u16).to_be();
    // SAFETY: plain socket(2) call; the descriptor is owned below.
    let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW, proto as i32) };
    assert!(fd >= 0, "socket: {}", std::io::Error::last_os_error());
    // SAFETY: fd is a fresh descriptor nobody else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let name = std::ffi::CString::new(dev).unwrap();
    // SAFETY: a NUL-terminated name.
    let ifindex = unsafe { libc::if_nametoindex(name.as_ptr()) };
    assert!(ifindex > 0, "no interface {dev}");
    // SAFETY: sockaddr_ll is plain old data; zeroed is valid.
    let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    addr.sll_family = libc::AF_PACKET as u16;
    addr.sll_protocol = proto;
    addr.sll_ifindex = ifindex as i32;
    addr.sll_halen = 6;
    // SAFETY: bind with a sockaddr_ll of the size passed.
    let rc = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            &addr as *const _ as *const libc::sockaddr,
            size_of::<libc::sockaddr_ll>() as u32,
        )
    };
    assert_eq!(rc, 0, "bind {dev}: {}", std::io::Error::last_os_error());
    (fd, addr)
}

/// Sends `frames` out of `dev` in namespace `ns`, `gap` apart.
pub fn send_on(ns: &str, dev: &str, frames: Vec<Vec<u8>>, gap: Duration) {
    let dev = dev.to_string();
    in_netns(ns, move || {
        let (fd, addr) = packet_socket(&dev);
        for f in &frames {
            // SAFETY: sendto with a buffer and address we own, of the lengths passed.
            let n = unsafe {
                libc::sendto(
                    fd.as_raw_fd(),
                    f.as_ptr().cast(),
                    f.len(),
                    0,
                    &addr as *const _ as *const libc::sockaddr,
                    size_of::<libc::sockaddr_ll>() as u32,
                )
            };
            assert_eq!(n, f.len() as isize, "sendto: {}", std::io::Error::last_os_error());
            std::thread::sleep(gap);
        }
    })
    .join()
    .unwrap();
}

/// Sends `frames` out of eth0 in namespace `ns`, back to back.
pub fn send_from(ns: &str, frames: Vec<Vec<u8>>) {
    send_on(ns, "eth0", frames, Duration::ZERO);
}

/// Collects the frames arriving at `dev` in namespace `ns` (not those it sends) that `keep`
/// accepts, until `stop` is set. Returns once the socket is listening.
pub fn capture(
    ns: &str,
    dev: &str,
    keep: impl Fn(&[u8]) -> bool + Send + 'static,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<Vec<Vec<u8>>> {
    let (ready_tx, ready) = mpsc::channel();
    let dev = dev.to_string();
    let watcher = in_netns(ns, move || {
        let (fd, _) = packet_socket(&dev);
        let timeout = libc::timeval {
            tv_sec: 0,
            tv_usec: 50_000,
        };
        // SAFETY: setsockopt with a timeval of the size passed.
        unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                &timeout as *const _ as *const libc::c_void,
                size_of::<libc::timeval>() as u32,
            )
        };
        ready_tx.send(()).unwrap();
        let mut seen = Vec::new();
        let mut buf = [0u8; 2048];
        while !stop.load(Ordering::Relaxed) {
            // SAFETY: sockaddr_ll is plain old data; zeroed is valid.
            let mut from: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
            let mut len = size_of::<libc::sockaddr_ll>() as u32;
            // SAFETY: recvfrom into buffers we own, of the lengths passed.
            let n = unsafe {
                libc::recvfrom(
                    fd.as_raw_fd(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    0,
                    &mut from as *mut _ as *mut libc::sockaddr,
                    &mut len,
                )
            };
            if n >= 14 && from.sll_pkttype != libc::PACKET_OUTGOING && keep(&buf[..n as usize]) {
                seen.push(buf[..n as usize].to_vec());
            }
        }
        seen
    });
    ready.recv_timeout(Duration::from_secs(5)).expect("watcher listening");
    watcher
}

/// Counts frames arriving at eth0 in namespace `ns` (not sent by it) whose destination MAC is
/// `dst`, until `stop` is set. Returns once the socket is listening.
pub fn watch(ns: &str, dst: [u8; 6], stop: Arc<AtomicBool>) -> std::thread::JoinHandle<usize> {
    let frames = capture(ns, "eth0", move |f| f[..6] == dst, stop);
    std::thread::spawn(move || frames.join().unwrap().len())
}

/// The MAC of `dev` in namespace `ns`.
pub fn mac_of(ns: &str, dev: &str) -> [u8; 6] {
    let out = std::process::Command::new("ip")
        .args(["netns", "exec", ns, "cat", &format!("/sys/class/net/{dev}/address")])
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let mut mac = [0u8; 6];
    for (b, part) in mac.iter_mut().zip(text.trim().split(':')) {
        *b = u8::from_str_radix(part, 16).unwrap();
    }
    mac
}

/// An ARP reply "10.77.0.100 is at `mac`", broadcast, from `mac`: what a VM claiming the remote
/// host's (the gateway's) address sends.
pub fn arp_reply_from(mac: [u8; 6]) -> Vec<u8> {
    let mut f = Vec::with_capacity(60);
    f.extend_from_slice(&[0xff; 6]);
    f.extend_from_slice(&mac);
    f.extend_from_slice(&[0x08, 0x06, 0, 1, 0x08, 0, 6, 4, 0, 2]);
    f.extend_from_slice(&mac);
    f.extend_from_slice(&[10, 77, 0, 100]);
    f.extend_from_slice(&[0xff; 6]);
    f.extend_from_slice(&[10, 77, 0, 255]);
    f.resize(60, 0);
    f
}
