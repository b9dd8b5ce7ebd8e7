//! Max-min fair sharing of one link (water-filling).
//!
//! Given a capacity and demands, every demand gets `min(demand, level)` where the water level is
//! the largest value whose allocations fit the capacity: small demands are met in full and the
//! rest split what remains equally. The result is work-conserving: it uses
//! `min(capacity, sum of demands)`.
//!
//! Over several links ([`progressive_fill`]), each flow crossing some of them: every flow's rate
//! rises at the same pace until a link it crosses is full, then stops; the others go on. The
//! result is the max-min fair allocation: no flow can gain without taking from one that has no
//! more.

/// Allocates `capacity` among `demands` max-min fairly; the result is in the demands' order.
pub fn share(capacity: f64, demands: &[f64]) -> Vec<f64> {
    let mut order: Vec<usize> = (0..demands.len()).collect();
    order.sort_by(|&a, &b| demands[a].total_cmp(&demands[b]).then(a.cmp(&b)));
    let mut out = vec![0.0; demands.len()];
    let mut left = capacity.max(0.0);
    let mut remaining = demands.len();
    for i in order {
        let fair = left / remaining as f64;
        let give = demands[i].max(0.0).min(fair);
        out[i] = give;
        left -= give;
        remaining -= 1;
    }
    out
}

/// Max-min fair rates for flows that each cross the links `paths[i]` (a flow with no path gets
/// nothing), over links of finite capacity `caps`, by progressive filling.
pub fn progressive_fill(caps: &[f64], paths: &[Vec<usize>]) -> Vec<f64> {
    let mut left: Vec<f64> = caps.iter().map(|c| c.max(0.0)).collect();
    let mut rate = vec![0.0; paths.len()];
    let mut rising: Vec<bool> = paths.iter().map(|p| !p.is_empty()).collect();
    while rising.iter().any(|&r| r) {
        // The smallest equal raise that fills some link.
        let mut crossing = vec![0usize; left.len()];
        for (i, p) in paths.iter().enumerate() {
            if rising[i] {
                for &l in p {
                    crossing[l] += 1;
                }
            }
        }
        let raise = (0..left.len())
            .filter(|&l| crossing[l] > 0)
            .map(|l| left[l] / crossing[l] as f64)
            .fold(f64::INFINITY, f64::min);
        if !raise.is_finite() {
            // Only unbounded links left: nothing to share out (capacities must be finite).
            break;
        }
        if !raise.is_finite() {
            // Only unbounded links left: nothing to share out (capacities must be finite).
            break;
        }
        for (l, n) in crossing.iter().enumerate() {
            left[l] -= raise * *n as f64;
        }
        for (i, p) in paths.iter().enumerate() {
            if rising[i] {
                rate[i] += raise;
                // A flow stops when a link it crosses is full (to rounding).
                if p.iter().any(|&l| left[l] <= 1e-9 * caps[l].max(1.0)) {
                    rising[i] = false;
                }
            }
        }
    }
    rate
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn small_demands_are_met_and_the_rest_split_equally() {
        assert_eq!(share(10.0, &[2.0, 8.0, 8.0]), [2.0, 4.0, 4.0]);
        assert_eq!(share(10.0, &[1.0, 2.0]), [1.0, 2.0]);
        assert_eq!(share(0.0, &[1.0, 2.0]), [0.0, 0.0]);
        assert!(share(5.0, &[]).is_empty());
    }

    #[test]
    fn a_flow_limited_elsewhere_leaves_its_share_to_the_others() {
        // Flows 0 and 1 share link 0 (10); flow 1 also crosses link 1 (2): it gets 2, flow 0 gets 8.
        assert_eq!(progressive_fill(&[10.0, 2.0], &[vec![0], vec![0, 1]]), [8.0, 2.0]);
        // No path, nothing.
        assert_eq!(progressive_fill(&[10.0], &[vec![], vec![0]]), [0.0, 10.0]);
    }

    proptest! {
        #[test]
        fn progressive_fill_is_feasible_and_every_flow_is_bottlenecked(
            caps in proptest::collection::vec(0.0f64..100.0, 1..6),
            raw in proptest::collection::vec(proptest::collection::vec(0usize..6, 0..3), 1..10),
        ) {
            let paths: Vec<Vec<usize>> = raw
                .into_iter()
                .map(|p| { let mut p: Vec<usize> = p.into_iter().filter(|&l| l < caps.len()).collect(); p.sort(); p.dedup(); p })
                .collect();
            let r = progressive_fill(&caps, &paths);
            for (l, c) in caps.iter().enumerate() {
                let used: f64 = paths.iter().zip(&r).filter(|(p, _)| p.contains(&l)).map(|(_, x)| x).sum();
                prop_assert!(used <= c + 1e-6);
            }
            // Each flow with a path crosses a full link on which no flow gets more than it.
            for (i, p) in paths.iter().enumerate() {
                if p.is_empty() { prop_assert_eq!(r[i], 0.0); continue; }
                let bottleneck = p.iter().any(|&l| {
                    let used: f64 = paths.iter().zip(&r).filter(|(q, _)| q.contains(&l)).map(|(_, x)| x).sum();
                    let max = paths.iter().zip(&r).filter(|(q, _)| q.contains(&l)).map(|(_, x)| *x).fold(0.0, f64::max);
                    used >= caps[l] - 1e-6 && r[i] >= max - 1e-6
                });
                prop_assert!(bottleneck, "flow {} at {} has no bottleneck", i, r[i]);
            }
        }
    }

    proptest! {
        #[test]
        fn work_conserving_and_fair(cap in 0.0f64..100.0, d in proptest::collection::vec(0.0f64..50.0, 1..12)) {
            let a = share(cap, &d);
            let used: f64 = a.iter().sum();
            let want: f64 = d.iter().sum();
            prop_assert!((used - cap.min(want)).abs() < 1e-9);
            let level = a.iter().cloned().fold(0.0, f64::max);
            for (ai, di) in a.iter().zip(&d) {
                prop_assert!(*ai <= di + 1e-12);
                // A flow that got less than it asked for got the highest share.
                if *ai < di - 1e-9 { prop_assert!((ai - level).abs() < 1e-9); }
            }
        }
    }
}
