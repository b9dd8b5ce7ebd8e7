//! What `teamster ctl lacp` and `GET /api/v1/lacp` show of the LACP members: what
//! `ovs-appctl lacp/show` and `lacp/stats-show` show of a bond, per member.

use serde::{Deserialize, Serialize};
use teamster_core::teaming::lacp::{Member, MuxState, RxState};
use teamster_core::teaming::{Team, UplinkId};
use teamster_core::wire::lacp::{state, LacpInfo};
use utoipa::ToSchema;

/// One side (actor or partner) of a member's LACP information.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct LacpSideView {
    pub system_id: String,
    pub system_priority: u16,
    pub key: u16,
    pub port_id: u16,
    pub port_priority: u16,
    /// The state bits as a number, and by name (activity, timeout, aggregation, synchronized,
    /// collecting, distributing, defaulted, expired).
    pub state: u8,
    pub state_bits: Vec<String>,
}

/// A member's LACPDU and Marker counters.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct LacpCountersView {
    pub rx_lacpdus: u64,
    pub tx_lacpdus: u64,
    pub rx_bad: u64,
    pub rx_markers: u64,
    pub tx_marker_responses: u64,
    pub expirations: u64,
    pub actor_churns: u64,
    pub partner_churns: u64,
}

/// One LACP member.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct LacpMemberView {
    pub uplink: String,
    /// active or passive; fast or slow; active-backup or down.
    pub activity: String,
    pub rate: String,
    pub fallback: String,
    /// current, expired, defaulted or disabled (the receive machine).
    pub rx_state: String,
    /// detached, waiting, attached or collecting-distributing (the mux machine).
    pub mux_state: String,
    /// In its key's aggregate.
    pub selected: bool,
    /// Carrying traffic: collecting and distributing, or the fallback member.
    pub usable: bool,
    /// Carrying traffic as the fallback member (no partner anywhere).
    pub fallback_active: bool,
    pub actor_churn: bool,
    pub partner_churn: bool,
    pub actor: LacpSideView,
    pub partner: LacpSideView,
    pub counters: LacpCountersView,
}

fn side(i: &LacpInfo) -> LacpSideView {
    LacpSideView {
        system_id: i.system.to_string(),
        system_priority: i.system_priority,
        key: i.key,
        port_id: i.port,
        port_priority: i.port_priority,
        state: i.state,
        state_bits: state::names(i.state).into_iter().map(str::to_string).collect(),
    }
}

fn member(team: &Team, m: &Member, name: String) -> LacpMemberView {
    let lacp = team.lacp();
    let c = m.counters;
    LacpMemberView {
        uplink: name,
        activity: m.settings.activity.to_string(),
        rate: m.settings.rate.to_string(),
        fallback: m.settings.fallback.to_string(),
        rx_state: match m.rx {
            RxState::Current => "current",
            RxState::Expired => "expired",
            RxState::Defaulted => "defaulted",
            RxState::PortDisabled => "disabled",
        }
        .into(),
        mux_state: match m.mux {
            MuxState::Detached => "detached",
            MuxState::Waiting => "waiting",
            MuxState::Attached => "attached",
            MuxState::CollectingDistributing => "collecting-distributing",
        }
        .into(),
        selected: m.selected.is_some(),
        usable: team.uplink_usable(m.uplink),
        fallback_active: lacp.falling_back(m.uplink),
        actor_churn: m.actor_churn,
        partner_churn: m.partner_churn,
        actor: side(&m.actor()),
        partner: side(&m.partner),
        counters: LacpCountersView {
            rx_lacpdus: c.rx_lacpdus,
            tx_lacpdus: c.tx_lacpdus,
            rx_bad: c.rx_bad,
            rx_markers: c.rx_markers,
            tx_marker_responses: c.tx_marker_responses,
            expirations: c.expirations,
            actor_churns: c.actor_churns,
            partner_churns: c.partner_churns,
        },
    }
}

/// Every LACP member of `team`, uplinks named by `name`.
pub(super) fn lacp_members(team: &Team, name: impl Fn(UplinkId) -> String) -> Vec<LacpMemberView> {
    team.lacp()
        .members()
        .iter()
        .map(|m| member(team, m, name(m.uplink)))
        .collect()
}

/// The members as `ovs-appctl lacp/show` prints a bond's: the actor's identity, then per
/// member its state, actor and partner information, and counters.
pub fn lacp_text(members: &[LacpMemberView]) -> String {
    if members.is_empty() {
        return "no port group runs LACP\n".into();
    }
    let mut out = String::new();
    let aggregate = |m: &LacpMemberView| (m.actor.system_id.clone(), m.actor.system_priority, m.actor.key);
    let mut aggregates: Vec<(String, u16, u16)> = Vec::new();
    for m in members {
        if !aggregates.contains(&aggregate(m)) {
            aggregates.push(aggregate(m));
        }
    }
    for agg in aggregates {
        let of_key: Vec<&LacpMemberView> = members.iter().filter(|m| aggregate(m) == agg).collect();
        let first = of_key[0];
        let negotiated = of_key.iter().any(|m| m.mux_state == "collecting-distributing");
        let fallback = of_key.iter().any(|m| m.fallback_active);
        out += &format!("---- aggregation key {} ----\n", agg.2);
        out += &format!(
            "  status: {} {}\n",
            first.activity,
            if negotiated {
                "negotiated"
            } else if fallback {
                "fallback (active-backup: no partner)"
            } else {
                "not negotiated"
            }
        );
        out += &format!("  sys_id: {}\n", first.actor.system_id);
        out += &format!("  sys_priority: {}\n", first.actor.system_priority);
        out += &format!("  lacp_time: {}\n", first.rate);
        out += &format!("  fallback: {}\n\n", first.fallback);
        for m in of_key {
            let status = if m.usable && !m.fallback_active {
                "current attached"
            } else if m.fallback_active {
                "defaulted, carrying traffic (fallback)"
            } else if m.selected {
                "selected, not distributing"
            } else {
                "not selected"
            };
            out += &format!("member {}: {} ({}, {})\n", m.uplink, status, m.rx_state, m.mux_state);
            out += &format!(
                "  port_id: {}\n  port_priority: {}\n  may_enable: {}\n\n",
                m.actor.port_id, m.actor.port_priority, m.usable
            );
            for (who, s) in [("actor", &m.actor), ("partner", &m.partner)] {
                out += &format!("  {who} sys_id: {}\n", s.system_id);
                out += &format!("  {who} sys_priority: {}\n", s.system_priority);
                out += &format!("  {who} port_id: {}\n", s.port_id);
                out += &format!("  {who} port_priority: {}\n", s.port_priority);
                out += &format!("  {who} key: {}\n", s.key);
                out += &format!("  {who} state: {}\n\n", s.state_bits.join(" "));
            }
            let c = &m.counters;
            out += &format!(
                "  RX PDUs: {}  TX PDUs: {}  RX bad: {}  RX markers: {}  TX marker responses: {}\n",
                c.rx_lacpdus, c.tx_lacpdus, c.rx_bad, c.rx_markers, c.tx_marker_responses
            );
            out += &format!(
                "  expirations: {}  actor churn: {} ({} times)  partner churn: {} ({} times)\n\n",
                c.expirations, m.actor_churn, c.actor_churns, m.partner_churn, c.partner_churns
            );
        }
    }
    out
}
