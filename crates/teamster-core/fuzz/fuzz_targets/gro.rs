//! Fuzzes receive coalescing: any sequence of frames (the input split at 0xff bytes) goes in;
//! nothing panics, every frame that went in is counted in exactly one that comes out, the
//! output is never longer than the input, and every super-frame's TCP checksum is valid.
#![no_main]

use libfuzzer_sys::fuzz_target;
use teamster_core::offload::{l4_checksum_valid, Gro};

fuzz_target!(|data: &[u8]| {
    let frames: Vec<Vec<u8>> = data.split(|b| *b == 0xff).map(<[u8]>::to_vec).collect();
    let total: usize = frames.iter().map(Vec::len).sum();
    let n = frames.len();
    let mut g = Gro::new();
    let mut out = Vec::new();
    for f in frames {
        g.receive(f, &mut out);
    }
    g.flush(&mut out);
    assert!(out.len() <= n);
    let segments: usize = out.iter().map(|d| usize::from(d.segments)).sum();
    assert_eq!(segments, n);
    for d in &out {
        if d.segments > 1 {
            assert!(l4_checksum_valid(&d.frame));
        }
    }
    // Merging drops only repeated headers: the output is never longer than the input.
    assert!(out.iter().map(|d| d.frame.len()).sum::<usize>() <= total);
});
