//! The exact fluid allocator: what every node should get, given capacity and demands.
//!
//! It is the oracle the packet scheduler is tested against, and the model the simulator's fluid
//! mode uses. The rule is in the [module documentation](super).

use super::{NodeId, Tree};

/// Per-node allocations in bits/s, indexed by [`NodeId`].
#[derive(Debug, Clone, PartialEq)]
pub struct Allocation(pub Vec<f64>);

impl Allocation {
    /// The allocation of node `id`.
    pub fn get(&self, id: NodeId) -> f64 {
        self.0[id.0]
    }
}

/// Allocates `capacity_bps` over `tree`. `demand[i]` is node `i`'s demand in bits/s (None or
/// absent: unlimited); an inner node's demand, if given, caps it on top of its children's.
pub fn allocate(tree: &Tree, capacity_bps: f64, demand: &[Option<f64>]) -> Allocation {
    let n = tree.len();
    // Tops, children first: children always have larger indices than their parent.
    let mut top = vec![f64::INFINITY; n];
    for i in (0..n).rev() {
        let node = tree.node(NodeId(i));
        let mut t = node.spec.limit.map_or(f64::INFINITY, |l| l.bps_f64());
        if let Some(Some(d)) = demand.get(i) {
            t = t.min(d.max(0.0));
        }
        if !node.children.is_empty() {
            t = t.min(node.children.iter().map(|c| top[c.0]).sum());
        }
        top[i] = t;
    }
    let mut x = vec![0.0; n];
    x[0] = capacity_bps.max(0.0).min(top[0]);
    for i in 0..n {
        let children = &tree.node(NodeId(i)).children;
        if children.is_empty() {
            continue;
        }
        let tops: Vec<f64> = children.iter().map(|c| top[c.0]).collect();
        let res: Vec<f64> = children
            .iter()
            .zip(&tops)
            .map(|(c, t)| tree.node(*c).spec.reservation.bps_f64().min(*t))
            .collect();
        let reserved: f64 = res.iter().sum();
        let got = if reserved >= x[i] {
            // The capacity cannot cover the reservations: split in proportion to them.
            waterfill(x[i], &res, &tops)
        } else {
            let shares: Vec<f64> = children
                .iter()
                .map(|c| f64::from(tree.node(*c).spec.shares.get()))
                .collect();
            let room: Vec<f64> = tops.iter().zip(&res).map(|(t, r)| t - r).collect();
            let excess = waterfill(x[i] - reserved, &shares, &room);
            res.iter().zip(excess).map(|(r, e)| r + e).collect()
        };
        for (c, g) in children.iter().zip(got) {
            x[c.0] = g;
        }
    }
    Allocation(x)
}

/// Weighted water-filling: item `i` gets `min(level * weight[i], cap[i])`, with the level the
/// largest for which the total stays within `capacity` (every item at its cap if they all fit).
/// Items of zero weight get nothing.
pub fn waterfill(capacity: f64, weight: &[f64], cap: &[f64]) -> Vec<f64> {
    let mut out = vec![0.0; weight.len()];
    let mut order: Vec<usize> = (0..weight.len()).filter(|&i| weight[i] > 0.0 && cap[i] > 0.0).collect();
    order.sort_by(|&a, &b| (cap[a] / weight[a]).total_cmp(&(cap[b] / weight[b])).then(a.cmp(&b)));
    let mut left = capacity.max(0.0);
    let mut weight_left: f64 = order.iter().map(|&i| weight[i]).sum();
    for (k, &i) in order.iter().enumerate() {
        let level = left / weight_left;
        if cap[i] / weight[i] <= level {
            out[i] = cap[i];
            left -= cap[i];
            weight_left -= weight[i];
        } else {
            for &j in &order[k..] {
                out[j] = level * weight[j];
            }
            break;
        }
    }
    out
}
