//! A local user without privilege, for the tests that attack the switch and the controller as
//! one would: a child process forked from the test and switched to uid and gid 65534 (`nobody`)
//! before it does anything, so the kernel sees another user's sockets, symlinks and locks.
//!
//! Each attack runs in the child as raw system calls on memory prepared before the fork (a
//! forked child of a threaded process may not allocate), reports through a page shared with
//! the test, dies with the test (PR_SET_PDEATHSIG) or after its own deadline, and is killed
//! when its [`Intruder`] is dropped.

#![allow(dead_code)] // each test binary uses its own part

use std::ffi::CString;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The unprivileged user the attacks run as.
pub const NOBODY: u32 = 65534;
/// The most connections one churning attacker keeps.
pub const MAX_CONNECTIONS: usize = 2048;
/// How long an attacker lives at most, whatever the test does.
const LIFETIME: Duration = Duration::from_secs(120);

/// What the child reports: counts it bumps, and the last result of an attempt (0 or errno).
#[repr(C)]
pub struct Report {
    /// Connections opened, or swaps made, or 1 once a lock is held.
    pub done: AtomicU64,
    /// Failed attempts.
    pub failed: AtomicU64,
    /// The last errno (0: the last attempt worked; -1: not yet tried).
    pub errno: AtomicI64,
}

/// A running attacker: its pid and its report page. Killed (SIGKILL) when dropped.
pub struct Intruder {
    pub pid: libc::pid_t,
    report: *mut Report,
}

// SAFETY: the report page is shared memory written only with atomics.
unsafe impl Send for Intruder {}

impl Intruder {
    pub fn report(&self) -> &Report {
        // SAFETY: the page lives until drop, mapped MAP_SHARED before the fork.
        unsafe { &*self.report }
    }

    /// Waits (up to `limit`) until the child has done `n` things; false if it did not.
    pub fn await_done(&self, n: u64, limit: Duration) -> bool {
        let t0 = Instant::now();
        while self.report().done.load(Ordering::Relaxed) < n {
            if t0.elapsed() > limit || self.exited() {
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        true
    }

    /// Whether the child has already ended (it cannot become nobody, say).
    pub fn exited(&self) -> bool {
        let mut status = 0;
        // SAFETY: waitpid on our own child, WNOHANG.
        let r = unsafe { libc::waitpid(self.pid, &mut status, libc::WNOHANG | libc::__WALL) };
        r == self.pid
    }
}

impl Drop for Intruder {
    fn drop(&mut self) {
        // SAFETY: kill and reap our own child; then unmap the page it shared.
        unsafe {
            libc::kill(self.pid, libc::SIGKILL);
            let mut status = 0;
            libc::waitpid(self.pid, &mut status, 0);
            libc::munmap(self.report.cast(), std::mem::size_of::<Report>());
        }
    }
}

/// Forks a child that becomes nobody and runs `attack` (which must only make system calls on
/// memory prepared before the fork), then ends it.
fn spawn(attack: impl FnOnce(&Report, i64)) -> Intruder {
    // SAFETY: a fresh anonymous shared page, checked; the child only uses atomics and system
    // calls on memory made before the fork, then _exits.
    unsafe {
        let page = libc::mmap(
            std::ptr::null_mut(),
            std::mem::size_of::<Report>(),
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        assert_ne!(page, libc::MAP_FAILED, "mmap");
        let report = page.cast::<Report>();
        report.write(Report {
            done: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            errno: AtomicI64::new(-1),
        });
        let deadline = monotonic_s() + LIFETIME.as_secs() as i64;
        let parent = libc::getpid();
        let pid = libc::fork();
        assert!(pid >= 0, "fork");
        if pid == 0 {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            if libc::getppid() != parent {
                libc::_exit(3);
            }
            let no_groups: [libc::gid_t; 0] = [];
            if libc::setgroups(0, no_groups.as_ptr()) != 0
                || libc::setresgid(NOBODY, NOBODY, NOBODY) != 0
                || libc::setresuid(NOBODY, NOBODY, NOBODY) != 0
            {
                libc::_exit(2);
            }
            attack(&*report, deadline);
            libc::_exit(0);
        }
        Intruder { pid, report }
    }
}

/// Seconds on the monotonic clock (callable in the child).
fn monotonic_s() -> i64 {
    monotonic_ns() / 1_000_000_000
}

/// Nanoseconds on the monotonic clock (callable in the child).
fn monotonic_ns() -> i64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec * 1_000_000_000 + ts.tv_nsec
}

fn errno() -> i64 {
    i64::from(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
}

/// A user without the token who keeps `n` connections to 127.0.0.1:`port` open, reopening
/// each as soon as the server closes it, never sending a byte: idle connections and churn at
/// once. `done` counts the connections opened.
pub fn churn(port: u16, n: usize) -> Intruder {
    assert!(n <= MAX_CONNECTIONS);
    let addr = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(std::net::Ipv4Addr::LOCALHOST).to_be(),
        },
        sin_zero: [0; 8],
    };
    spawn(move |report, deadline| {
        let mut fds = [libc::pollfd {
            fd: -1,
            events: libc::POLLIN | libc::POLLRDHUP,
            revents: 0,
        }; MAX_CONNECTIONS];
        let mut sink = [0u8; 512];
        loop {
            if monotonic_s() > deadline {
                // SAFETY: ending the child.
                unsafe { libc::_exit(0) };
            }
            for slot in fds.iter_mut().take(n).filter(|p| p.fd < 0) {
                // SAFETY: a socket of our own, connected to a sockaddr_in made before the fork.
                unsafe {
                    let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
                    if fd < 0 {
                        report.failed.fetch_add(1, Ordering::Relaxed);
                        report.errno.store(errno(), Ordering::Relaxed);
                        break;
                    }
                    let r = libc::connect(
                        fd,
                        (&addr as *const libc::sockaddr_in).cast(),
                        std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
                    );
                    if r != 0 {
                        report.failed.fetch_add(1, Ordering::Relaxed);
                        report.errno.store(errno(), Ordering::Relaxed);
                        libc::close(fd);
                        break;
                    }
                    slot.fd = fd;
                    report.done.fetch_add(1, Ordering::Relaxed);
                }
            }
            // SAFETY: poll and read on our own sockets, into a buffer made before the fork.
            unsafe {
                libc::poll(fds.as_mut_ptr(), n as libc::nfds_t, 50);
                for p in fds.iter_mut().take(n) {
                    if p.fd >= 0 && p.revents != 0 {
                        let got = libc::read(p.fd, sink.as_mut_ptr().cast(), sink.len());
                        if got <= 0 || p.revents & (libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR) != 0 {
                            libc::close(p.fd);
                            p.fd = -1;
                        }
                    }
                    p.revents = 0;
                }
            }
        }
    })
}

/// A user who swaps the symlink `dir/name` between pointing at `a` and at `b`, each for `phase`
/// (the next link is made during the current phase and renamed over the old one on time, so
/// the name always exists and each target is there half the time). `done` counts swaps.
pub fn swap_symlink(
    dir: &std::path::Path,
    name: &str,
    a: &std::path::Path,
    b: &std::path::Path,
    phase: Duration,
) -> Intruder {
    let c = |p: &std::path::Path| CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
    let link = c(&dir.join(name));
    let tmp = [c(&dir.join(format!(".{name}.a"))), c(&dir.join(format!(".{name}.b")))];
    let targets = [c(a), c(b)];
    let phase = phase.as_nanos() as i64;
    spawn(move |report, deadline| {
        let mut due = monotonic_ns();
        for k in 0usize.. {
            if due / 1_000_000_000 > deadline {
                return;
            }
            let (target, tmp) = (&targets[k % 2], &tmp[k % 2]);
            due += phase;
            // SAFETY: paths made before the fork.
            unsafe {
                libc::unlink(tmp.as_ptr());
                if libc::symlink(target.as_ptr(), tmp.as_ptr()) != 0 {
                    report.failed.fetch_add(1, Ordering::Relaxed);
                    report.errno.store(errno(), Ordering::Relaxed);
                    continue;
                }
                while monotonic_ns() < due {}
                if libc::rename(tmp.as_ptr(), link.as_ptr()) == 0 {
                    report.done.fetch_add(1, Ordering::Relaxed);
                } else {
                    report.failed.fetch_add(1, Ordering::Relaxed);
                    report.errno.store(errno(), Ordering::Relaxed);
                }
            }
        }
    })
}

/// A user who opens `path` read-only and holds an exclusive `flock` on it. `done` is 1 once
/// the lock is held; otherwise `errno` says why not (EACCES: it may not even open it).
pub fn squat_lock(path: &std::path::Path) -> Intruder {
    let path = CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    spawn(move |report, deadline| {
        // SAFETY: open and flock a path made before the fork; then wait to be killed.
        unsafe {
            let fd = libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
            if fd >= 0 && libc::flock(fd, libc::LOCK_EX | libc::LOCK_NB) == 0 {
                report.errno.store(0, Ordering::Relaxed);
                report.done.store(1, Ordering::Relaxed);
            } else {
                report.errno.store(errno(), Ordering::Relaxed);
            }
            while monotonic_s() < deadline {
                libc::sleep(1);
            }
            libc::_exit(0)
        }
    })
}

/// Waits (up to 10 s) until `intruder` has tried, and returns its errno (0: it succeeded).
pub fn outcome(intruder: &Intruder) -> i64 {
    let t0 = Instant::now();
    loop {
        let e = intruder.report().errno.load(Ordering::Relaxed);
        if e >= 0 {
            return e;
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "the intruder never tried");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The user and system CPU time process `pid` has used, from /proc.
pub fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command's closing parenthesis: state is field 3, utime 14, stime 15.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3, so utime and stime (fields 14 and 15) are f[11] and f[12].
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    let field = |i: usize| f.get(i).and_then(|x| x.parse::<u64>().ok()).unwrap_or(0);
    let ticks = field(11) + field(12);
    Duration::from_millis(ticks * 1000 / hz)
}
