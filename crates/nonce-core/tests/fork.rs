//! A factory enabled before the process forks refuses to generate in the child, every entry
//! point, factory, handle and thread cache, until it is enabled there again; the parent goes
//! on. Tested with real `fork()` calls: the child reports what its calls returned through a
//! pipe. The calls include every encrypted entry point, whose keys `common::config` gives only
//! with every cipher built in.
// `fork`, `pipe`, `read`, `write`, `waitpid` and `_exit` are C calls.
#![allow(unsafe_code)]

use crate::common;

use common::{F, Op, T0, all_ops, config, enabled_as, machine_id};
use nonce_core::{Base, Cipher96, Error, Handle, ManualClock, NO_DEADLINE};

/// What a call returned, as one byte for the pipe.
fn code<T>(r: &Result<T, Error>) -> u8 {
    match r {
        Ok(_) => 0,
        Err(Error::Forked) => 1,
        Err(Error::Disabled) => 2,
        Err(_) => 3,
    }
}

/// Runs `child` in a forked child of this process and returns the bytes it wrote; the parent
/// waits for the child and checks that it exited normally.
fn in_child(child: impl FnOnce() -> Vec<u8>) -> Vec<u8> {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0, "pipe");
    let [read_end, write_end] = fds;
    // SAFETY: the child runs only `child` and `_exit`s; it never returns into the harness.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(child));
        let status = match out {
            Ok(bytes) => {
                // SAFETY: writes `bytes` from its own buffer.
                let written = unsafe { libc::write(write_end, bytes.as_ptr().cast(), bytes.len()) };
                if usize::try_from(written) == Ok(bytes.len()) {
                    0
                } else {
                    2
                }
            }
            Err(_) => 1,
        };
        // SAFETY: ends the child without running the parent's exit handlers.
        unsafe { libc::_exit(status) }
    }
    // SAFETY: closes the parent's copy of the write end, so the read below ends.
    unsafe { libc::close(write_end) };
    let mut got = Vec::new();
    let mut buf = [0u8; 256];
    loop {
        // SAFETY: reads into `buf`, at most its length.
        let n = unsafe { libc::read(read_end, buf.as_mut_ptr().cast(), buf.len()) };
        assert!(n >= 0, "read");
        if n == 0 {
            break;
        }
        got.extend_from_slice(&buf[..usize::try_from(n).unwrap()]);
    }
    // SAFETY: closes the read end this function opened.
    unsafe { libc::close(read_end) };
    let mut status = 0;
    // SAFETY: waits for the child forked above.
    assert_eq!(unsafe { libc::waitpid(pid, &raw mut status, 0) }, pid);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "child failed: status {status:#x}"
    );
    got
}

/// Entry points that one factory may all use (one kind per base size), run in the parent
/// before the fork so that its handle and its thread's cache hold blocks of every kind.
const WARM: [Op; 9] = [
    Op::Counter64,
    Op::HandleCounter64,
    Op::Sortable96,
    Op::HandleSortable96,
    Op::Counter128,
    Op::HandleCounter128,
    Op::Encrypted64(Base::Counter),
    Op::HandleEncrypted128,
    Op::Encrypted128(Base::Counter),
];

/// A factory, with the thread cache or without, enabled as machine `id`.
fn factory(clock: &ManualClock, thread_cache: bool, id: u16) -> F<'_> {
    let cfg = config(Cipher96::Blowfish).with_plain_and_encrypted(true);
    enabled_as(clock, cfg.with_thread_cache(thread_cache), id)
}

fn run_all(f: &F<'_>, h: &Handle<'_, &ManualClock>, ops: &[Op]) -> Vec<u8> {
    ops.iter().map(|op| code(&op.run(f, h))).collect()
}

#[test]
fn a_factory_enabled_before_a_fork_refuses_in_the_child() {
    for thread_cache in [false, true] {
        let clock = ManualClock::new(T0);
        let f = factory(&clock, thread_cache, 5);
        let h = f.handle();
        assert_eq!(run_all(&f, &h, &WARM), vec![0; WARM.len()]);

        let ops = all_ops();
        let in_the_child = in_child(|| {
            let mut out = run_all(&f, &h, &ops);
            out.push(u8::from(f.is_enabled()));
            out.push(u8::from(f.machine_id().is_some()));
            out
        });
        let refused = [vec![1; ops.len()], vec![0, 0]].concat();
        assert_eq!(
            in_the_child, refused,
            "thread cache {thread_cache}: {ops:?}"
        );

        // The parent goes on with its machine ID, its handle and its blocks.
        assert_eq!(run_all(&f, &h, &WARM), vec![0; WARM.len()]);
        assert!(f.is_enabled());
        let id = f.counter64().unwrap().decode(f.epoch_ms()).machine_id;
        assert_eq!(id, machine_id(5));
    }
}

#[test]
fn a_child_re_enables_the_factory_with_a_machine_id_of_its_own() {
    for thread_cache in [false, true] {
        let clock = ManualClock::new(T0);
        let f = factory(&clock, thread_cache, 5);
        let h = f.handle();
        assert_eq!(run_all(&f, &h, &WARM), vec![0; WARM.len()]);

        let in_the_child = in_child(|| {
            let mut out = vec![code(&f.counter64())];
            // The child's generation starts past everything the parent issued: past the
            // parent's counter64 burst, so the clock moves on before it.
            clock.advance(1000);
            f.enable(machine_id(6), NO_DEADLINE).unwrap();
            out.extend(run_all(&f, &h, &WARM));
            let id = f.counter64().unwrap().decode(f.epoch_ms()).machine_id;
            out.push(u8::try_from(id.get()).unwrap());
            // A fork of the child: the child's enable is the grandchild's parent's.
            out.extend(in_child(|| run_all(&f, &h, &WARM)));
            out
        });
        let expected = [vec![1], vec![0; WARM.len()], vec![6], vec![1; WARM.len()]].concat();
        assert_eq!(in_the_child, expected, "thread cache {thread_cache}");
        assert_eq!(run_all(&f, &h, &WARM), vec![0; WARM.len()]);
    }
}

/// Only an enabled factory is the parent's: one disabled at the fork, or built in the child,
/// is enabled in the child as anywhere else.
#[test]
fn factories_not_enabled_at_the_fork_work_in_the_child() {
    let clock = ManualClock::new(T0);
    let disabled = factory(&clock, true, 5);
    disabled.counter64().unwrap();
    disabled.disable();
    let in_the_child = in_child(|| {
        let mut out = vec![code(&disabled.counter64())];
        clock.advance(1000);
        disabled.enable(machine_id(7), NO_DEADLINE).unwrap();
        out.push(code(&disabled.counter64()));
        let built = factory(&clock, true, 8);
        out.push(code(&built.counter64()));
        out
    });
    assert_eq!(in_the_child, vec![2, 0, 0]);
}

#[test]
fn the_fork_message_says_what_went_wrong_and_what_to_do() {
    let msg = Error::Forked.to_string();
    assert!(msg.contains("this process was forked"), "{msg}");
    assert!(msg.contains("enabled in the parent"), "{msg}");
    assert!(
        msg.contains("re-enable the factory in the child with a machine ID of its own"),
        "{msg}"
    );
}
