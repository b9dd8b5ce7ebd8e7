//! What a run produced, in either fidelity: the per-second rows, port moves, timeline events and
//! packet-mode extras (latencies, refusals). The fluid and packet engines fill it; expectations,
//! reports and the CLI read it.

use teamster_core::teaming::{LbtDecision, MoveReason, PortMove, UplinkId};

/// One recorded row: means over `[t_s, t_s + interval)`, in bits/s.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub t_s: f64,
    pub uplink_tx: Vec<f64>,
    pub uplink_rx: Vec<f64>,
    pub offered_tx: Vec<f64>,
    pub delivered_tx: Vec<f64>,
    pub offered_rx: Vec<f64>,
    pub delivered_rx: Vec<f64>,
}

impl Row {
    pub fn total_offered_tx(&self) -> f64 {
        self.offered_tx.iter().sum()
    }
    pub fn total_delivered(&self) -> f64 {
        self.delivered_tx.iter().sum::<f64>() + self.delivered_rx.iter().sum::<f64>()
    }
    pub fn total_delivered_tx(&self) -> f64 {
        self.delivered_tx.iter().sum()
    }
}

/// A port's move as the run saw it.
#[derive(Debug, Clone, PartialEq)]
pub struct MoveRecord {
    pub t_s: f64,
    pub port: String,
    pub from: Option<String>,
    pub to: Option<String>,
    pub reason: String,
    /// The figures behind a Load-Based Teaming move.
    pub lbt: Option<LbtDecision>,
}

/// Everything a run produced.
#[derive(Debug, Clone, PartialEq)]
pub struct RunOutput {
    pub uplinks: Vec<String>,
    pub capacities: Vec<f64>,
    pub ports: Vec<String>,
    pub rows: Vec<Row>,
    pub moves: Vec<MoveRecord>,
    /// Timeline events applied, as `(t_s, description)`.
    pub events: Vec<(f64, String)>,
    /// Notify-switch frames sent.
    pub notifications: usize,
    /// The LBT threshold, if any port group uses Load-Based Teaming.
    pub lbt_threshold: Option<f64>,
    /// Packet mode: per port, each TCP_RR transaction's (completion time in s, latency in µs).
    pub latencies: Vec<Vec<(f64, f64)>>,
    /// Packet mode: changes refused by admission control, as (time in s, error).
    pub rejections: Vec<(f64, String)>,
    /// Packet mode: packets sent.
    pub packets: u64,
    /// Per port, the uplink it was on when the run ended.
    pub port_uplinks: Vec<Option<String>>,
    /// Packet mode: per port, packets that reached the remote host after a later packet of
    /// the same stream (TCP would see them out of order).
    pub reordered: Vec<u64>,
    /// Packet mode: per port, how many times one of its streams changed uplink.
    pub member_changes: Vec<u64>,
    /// Each port group's teaming and the receive queues (VMQs) its team offers it.
    pub teams: Vec<TeamLine>,
    /// Cluster mode: the cluster's counts each time one changed.
    pub cluster: Vec<ClusterRow>,
    /// Per port, its reservation as steps `(from t_s, bits/s)`, oldest first; empty where the
    /// model keeps none (migration, receive and cluster runs).
    pub reservations: Vec<Vec<(f64, f64)>>,
}

/// Cluster mode: reservations that cannot be kept at `t_s`, and migrations, faults and
/// refusals so far.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ClusterRow {
    pub t_s: f64,
    pub violated: usize,
    pub migrations: usize,
    pub faults: usize,
    pub refusals: usize,
}

impl RunOutput {
    /// Port `i`'s reservation at `t_s`, bits/s (0 where none is known).
    pub fn reservation_at(&self, i: usize, t_s: f64) -> f64 {
        self.reservations
            .get(i)
            .and_then(|steps| steps.iter().rev().find(|(from, _)| *from <= t_s))
            .map_or(0.0, |(_, bps)| *bps)
    }

    /// An empty run over `uplinks` (with their `capacities`) and `ports`: no rows yet, every
    /// per-port count zero.
    pub fn new(uplinks: Vec<String>, capacities: Vec<f64>, ports: Vec<String>) -> RunOutput {
        let np = ports.len();
        RunOutput {
            uplinks,
            capacities,
            ports,
            rows: Vec::new(),
            moves: Vec::new(),
            events: Vec::new(),
            notifications: 0,
            lbt_threshold: None,
            latencies: vec![Vec::new(); np],
            rejections: Vec::new(),
            packets: 0,
            port_uplinks: Vec::new(),
            reordered: vec![0; np],
            member_changes: vec![0; np],
            teams: Vec::new(),
            cluster: Vec::new(),
            reservations: vec![Vec::new(); np],
        }
    }
}

/// A port group's teaming, as the summary states it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct TeamLine {
    pub group: String,
    pub policy: String,
    pub mode: String,
    /// The receive queues (VMQs) the team offers the group: the sum of its active members'
    /// where each VM receives on one known member, else the smallest member's
    /// ([`teamster_core::teaming::TeamMode::vmq_queues`]).
    pub vmq_queues: u32,
    /// Each active member's receive queues, in failover order.
    pub member_queues: Vec<u32>,
}

/// The team lines of `groups` over uplinks with `queues` receive queues each.
pub fn team_lines(groups: &[teamster_core::teaming::PortGroupSpec], queues: &[u32]) -> Vec<TeamLine> {
    groups
        .iter()
        .map(|g| {
            let member_queues: Vec<u32> = g
                .order
                .active
                .iter()
                .map(|u| queues.get(u.0).copied().unwrap_or(1))
                .collect();
            TeamLine {
                group: g.name.clone(),
                policy: g.policy.to_string(),
                mode: g.mode.to_string(),
                vmq_queues: g.mode.vmq_queues(g.policy, &member_queues),
                member_queues,
            }
        })
        .collect()
}

impl MoveRecord {
    /// The record of team move `m` at `t_s`, naming uplinks from `uplinks` and the port by
    /// `port_name` (its ID if it has none).
    pub fn new(t_s: f64, m: PortMove, uplinks: &[String], port_name: Option<&str>) -> MoveRecord {
        let name = |u: Option<UplinkId>| u.map(|u| uplinks[u.0].clone());
        MoveRecord {
            t_s,
            port: port_name.map_or_else(|| m.port.to_string(), str::to_string),
            from: name(m.from),
            to: name(m.to),
            reason: m.reason.to_string(),
            lbt: match m.reason {
                MoveReason::LoadBased(d) => Some(d),
                _ => None,
            },
        }
    }
}

/// Formats a rate for reports, e.g. "6.60 Gbps".
pub fn gbps(bps: f64) -> String {
    format!("{:.2} Gbps", bps / 1e9)
}

/// Formats a fraction as a percentage with as many decimals as it needs (up to three):
/// 0.05 -> "5%", 0.001 -> "0.1%", 0.0125 -> "1.25%".
pub fn pct(fraction: f64) -> String {
    let s = format!("{:.3}", fraction * 100.0);
    let s = s.trim_end_matches('0').trim_end_matches('.');
    format!("{s}%")
}

#[cfg(test)]
mod tests {
    #[test]
    fn percentages_keep_their_decimals() {
        assert_eq!(super::pct(0.05), "5%");
        assert_eq!(super::pct(0.001), "0.1%");
        assert_eq!(super::pct(0.0125), "1.25%");
        assert_eq!(super::pct(0.75), "75%");
        assert_eq!(super::pct(0.0), "0%");
    }
}

#[cfg(test)]
mod team_line_tests {
    use super::*;
    use teamster_core::teaming::{FailoverOrder, Policy, PortGroupSpec, TeamMode, UplinkId};

    #[test]
    fn the_vmq_count_is_the_sum_or_the_minimum_as_the_mode_and_policy_say() {
        let group = |policy, mode| PortGroupSpec {
            name: "vms".into(),
            policy,
            order: FailoverOrder {
                active: vec![UplinkId(0), UplinkId(2)],
                standby: vec![UplinkId(1)],
            },
            failback: true,
            notify_switches: true,
            vlan: None,
            mode,
            tuning: Default::default(),
            lacp: Default::default(),
        };
        let queues = [8, 64, 4];
        let lines = team_lines(
            &[
                group(Policy::DYNAMIC, TeamMode::SwitchIndependent),
                group(Policy::ADDRESS_HASH, TeamMode::SwitchIndependent),
                group(Policy::HYPERV_PORT, TeamMode::Lacp),
            ],
            &queues,
        );
        let got: Vec<(u32, &[u32])> = lines
            .iter()
            .map(|l| (l.vmq_queues, l.member_queues.as_slice()))
            .collect();
        // Active members only (uplinks 0 and 2): 8 + 4, or the smaller, 4.
        assert_eq!(got, [(12, &[8, 4][..]), (4, &[8, 4][..]), (4, &[8, 4][..])]);
        assert_eq!(
            (lines[2].policy.as_str(), lines[2].mode.as_str()),
            ("hyperv-port", "lacp")
        );
    }
}
