//! Max-min fair sharing of one link (water-filling).
//!
//! Given a capacity and demands, every demand gets `min(demand, level)` where the water level is
//! the largest value whose allocations fit the capacity: small demands are met in full and the
//! rest split what remains equally. The result is work-conserving: it uses
//! `min(capacity, sum of demands)`.

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
