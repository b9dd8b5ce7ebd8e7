//! The hash functions behind the static policies, and the rendezvous pick used on failover.
//!
//! They are fixed and documented so that a physical switch's configuration, a test, or an
//! operator can predict them.

use crate::wire::FlowKey;
use core::net::IpAddr;

use super::IpHashMode;

/// FNV-1a (32-bit) of the six MAC octets: the source-MAC-hash policy's key.
pub fn source_mac_hash(mac: crate::wire::MacAddr) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in mac.0 {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}

/// FNV-1a (32-bit) of the source then the destination MAC, folded like [`ip_hash`]: Address
/// Hash's key for frames without IP addresses.
pub fn mac_pair_hash(src: crate::wire::MacAddr, dst: crate::wire::MacAddr) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in src.0.into_iter().chain(dst.0) {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h ^= h >> 16;
    h ^= h >> 8;
    h
}

/// The IP-hash key of a flow, or None if the frame carries no IP addresses.
///
/// `a = fold(src) ^ fold(dst)`, where `fold` is the IPv4 address as a big-endian u32 or the XOR
/// of an IPv6 address's four big-endian u32 words. With [`IpHashMode::L3L4`] and known ports
/// (not a fragment), `a ^= (src_port << 16) | dst_port`. Then `a ^= a >> 16; a ^= a >> 8`, so
/// every input bit reaches the low bits that `mod n` keeps. The uplink is
/// `active[a mod n]`. Fragments carry no ports, so under L3+L4 all fragments of a datagram hash
/// like L3 (they stay together; a flow that mixes fragments and whole packets may reorder).
pub fn ip_hash(flow: &FlowKey, mode: IpHashMode) -> Option<u32> {
    let (src, dst) = (flow.src_ip?, flow.dst_ip?);
    let mut a = ip_fold(src) ^ ip_fold(dst);
    if let (IpHashMode::L3L4, Some(sp), Some(dp)) = (mode, flow.src_port, flow.dst_port) {
        a ^= (u32::from(sp) << 16) | u32::from(dp);
    }
    a ^= a >> 16;
    a ^= a >> 8;
    Some(a)
}

/// An IP address folded to 32 bits: IPv4 as a big-endian u32, IPv6 as the XOR of its four
/// big-endian words.
pub(super) fn ip_fold(ip: IpAddr) -> u32 {
    match ip {
        IpAddr::V4(v4) => u32::from(v4),
        IpAddr::V6(v6) => v6
            .octets()
            .chunks_exact(4)
            .map(|w| u32::from_be_bytes([w[0], w[1], w[2], w[3]]))
            .fold(0, |acc, w| acc ^ w),
    }
}

/// Picks, among `candidates` (each an index and its salt), the index with the highest mixed
/// score for `key` (rendezvous, or highest-random-weight, hashing): removing a candidate only
/// moves the keys that chose it. The salt is the candidate's identity, not its index
/// ([`uplink_salt`] of an uplink's name), so renumbering the candidates (an uplink removed
/// before them) moves no key; equal scores go to the lower index.
pub fn rendezvous_pick<I: IntoIterator<Item = (usize, u64)>>(key: u64, candidates: I) -> Option<usize> {
    candidates
        .into_iter()
        .max_by_key(|&(c, salt)| {
            (
                mix(key ^ salt.wrapping_mul(0x9e37_79b9_7f4a_7c15)),
                core::cmp::Reverse(c),
            )
        })
        .map(|(c, _)| c)
}

/// A well-spread 64-bit mix of `x` (SplitMix64's finaliser), for table indices from hashes
/// whose low bits alone are weak.
pub fn spread(x: u64) -> u64 {
    mix(x)
}

/// An uplink's salt for [`rendezvous_pick`]: FNV-1a (64-bit) of its name, mixed (names that
/// differ in one character, as `uplink1` and `uplink3` do, get salts that differ everywhere).
pub fn uplink_salt(name: &str) -> u64 {
    mix(fnv1a64(name.bytes()))
}

/// FNV-1a (64-bit) of `bytes`.
pub fn fnv1a64(bytes: impl IntoIterator<Item = u8>) -> u64 {
    bytes.into_iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// SplitMix64's finaliser: a cheap, well-spread 64-bit mix.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::net::Ipv4Addr;

    #[test]
    fn ip_hash_formula_is_as_documented() {
        let flow = FlowKey {
            src_ip: Some(Ipv4Addr::new(10, 0, 0, 1).into()),
            dst_ip: Some(Ipv4Addr::new(10, 0, 0, 2).into()),
            src_port: Some(1000),
            dst_port: Some(80),
            ..Default::default()
        };
        let mut a: u32 = 0x0a00_0001 ^ 0x0a00_0002;
        let l3 = {
            let mut x = a;
            x ^= x >> 16;
            x ^= x >> 8;
            x
        };
        assert_eq!(ip_hash(&flow, IpHashMode::L3), Some(l3));
        a ^= (1000 << 16) | 80;
        a ^= a >> 16;
        a ^= a >> 8;
        assert_eq!(ip_hash(&flow, IpHashMode::L3L4), Some(a));
        assert_eq!(ip_hash(&FlowKey::default(), IpHashMode::L3), None);
    }

    #[test]
    fn rendezvous_moves_only_the_removed_candidates_keys() {
        let all = ["a", "b", "c", "d"].map(uplink_salt);
        let indexed = |skip: usize| all.into_iter().enumerate().filter(move |&(c, _)| c != skip);
        let mut moved = 0;
        for key in 0..10_000u64 {
            let before = rendezvous_pick(key, indexed(9)).unwrap();
            let after = rendezvous_pick(key, indexed(2)).unwrap();
            if before != 2 {
                assert_eq!(before, after, "key {key} moved although its candidate stayed");
            } else {
                moved += 1;
            }
            // The same candidates renumbered (one removed before them): the same pick.
            let renumbered = all[1..].iter().enumerate().map(|(c, &s)| (c, s));
            let pick = rendezvous_pick(key, renumbered).unwrap();
            assert_eq!(Some(pick + 1), rendezvous_pick(key, indexed(0)), "key {key}");
        }
        // About a quarter of keys chose candidate 2 (ideal 2,500): the spread is fair.
        assert!((2_200..2_800).contains(&moved), "moved {moved}");
    }
}
