//! `lua/session.lua` and `lua/session_renew.lua` from the Rust side
//! (docs/design.md §18): a session's record and set of leases in the
//! session's slot, and the light renew of its leases, batched per slot.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use redis::Value;

use super::super::call::Call;
use super::super::evalsha::{values, Named, Script};
use super::super::keys;
use super::super::lua;
use super::super::remembered;
use super::super::reply::bad_reply;
use super::super::store::{Backend, RedisStore};
use super::decode::{int, store_time, text, STATUS};
use crate::domain::{
    AttachedRenew, HolderLabel, OperationId, OwnerToken, ResourceId, SessionId, SessionRecord,
    StoreTime,
};
use crate::store::{SessionCall, SessionFound, StoreError};

static SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new("session", lua::SESSION.assembled));
static RENEW: LazyLock<Script> =
    LazyLock::new(|| Script::new("session_renew", lua::SESSION_RENEW.assembled));

/// Leases a light renew call carries at most (standalone and Sentinel:
/// one node holds every slot; a Cluster call carries one slot's).
const BATCH: usize = 100;

/// How many light renew calls run at once.
const IN_FLIGHT: usize = 16;

fn session_keys<'a>(k: &'a [String; 2]) -> Named<'a, 2> {
    [("record", k[0].as_str()), ("leases", k[1].as_str())]
}

struct Args<'a> {
    op: &'a str,
    arg: &'a str,
    n: &'a str,
    holder_label: &'a str,
    keep_ms: &'a str,
}

impl<'a> Args<'a> {
    fn named(&self) -> Named<'a, 5> {
        [
            ("op", self.op),
            ("operation id", self.arg),
            ("ttl ms", self.n),
            ("holder label", self.holder_label),
            ("keep ms", self.keep_ms),
        ]
    }
}

fn record(items: &[Value]) -> Result<SessionRecord, StoreError> {
    let ms = |at: usize| -> Result<u64, StoreError> {
        text(items, at)?.parse().map_err(|_| bad_reply())
    };
    let holder = text(items, 3)?;
    Ok(SessionRecord {
        now: store_time(int(items, 1)?)?,
        operation_id: text(items, 2)?.to_owned(),
        holder: if holder.is_empty() {
            None
        } else {
            Some(HolderLabel::parse(holder).map_err(|_| bad_reply())?)
        },
        ttl_ms: ms(4)?,
        created_at: StoreTime(ms(5)?),
        renewed_at: StoreTime(ms(6)?),
        expires_at: StoreTime(ms(7)?),
        leases: u64::try_from(int(items, 8)?).map_err(|_| bad_reply())?,
    })
}

fn decode(items: &[Value], call: &SessionCall<'_>) -> Result<SessionFound, StoreError> {
    Ok(match int(items, STATUS)? {
        1 if matches!(call, SessionCall::Detach { .. } | SessionCall::Forget) => SessionFound::Done,
        1 => SessionFound::Live(record(items)?),
        2 => SessionFound::Replayed(record(items)?),
        0 => SessionFound::Full(record(items)?),
        3 => SessionFound::OtherOperation,
        4 => SessionFound::Ended,
        5 => SessionFound::Expired,
        6 => SessionFound::Absent,
        _ => return Err(bad_reply()),
    })
}

impl RedisStore {
    fn session_key_pair(&self, id: &SessionId) -> [String; 2] {
        let (ns, id) = (&self.namespace, id.as_str());
        let record = format!("{ns}:session:v2:{{{id}}}");
        let leases = format!("{ns}:sessleases:v2:{{{id}}}");
        [record, leases]
    }

    pub(in crate::store) async fn session(
        &self,
        id: &SessionId,
        call: SessionCall<'_>,
        keep_ms: u64,
    ) -> Result<SessionFound, StoreError> {
        let k = self.session_key_pair(id);
        let (op, arg, n, holder, writes) = match call {
            SessionCall::Create {
                operation_id,
                ttl_ms,
                holder,
            } => (
                "create",
                operation_id.to_owned(),
                ttl_ms.to_string(),
                holder.map_or("", HolderLabel::as_str).to_owned(),
                true,
            ),
            SessionCall::Renew { ttl_ms } => (
                "renew",
                String::new(),
                ttl_ms.map_or_else(String::new, |ms| ms.to_string()),
                String::new(),
                true,
            ),
            SessionCall::Attach { member, max } => (
                "attach",
                member.to_owned(),
                max.to_string(),
                String::new(),
                true,
            ),
            SessionCall::Detach { member } => (
                "detach",
                member.to_owned(),
                String::new(),
                String::new(),
                true,
            ),
            SessionCall::End => ("end", String::new(), String::new(), String::new(), true),
            SessionCall::Get => ("get", String::new(), String::new(), String::new(), false),
            SessionCall::Forget => ("forget", String::new(), String::new(), String::new(), true),
        };
        // A renew to the session's own TTL: the script keeps the record
        // as long as that TTL says.
        let keep = match call {
            SessionCall::Renew { ttl_ms: None } => String::new(),
            _ => keep_ms.to_string(),
        };
        let args = Args {
            op,
            arg: &arg,
            n: &n,
            holder_label: &holder,
            keep_ms: &keep,
        };
        let named = session_keys(&k);
        let done = self
            .run(Call {
                script: &SCRIPT,
                tag: id.as_str(),
                keys: &values(&named),
                args: &values(&args.named()),
                acks: self.acks.filter(|_| writes),
            })
            .await?;
        decode(&done.value, &call)
    }

    pub(in crate::store) async fn session_page(
        &self,
        id: &SessionId,
        offset: u64,
        limit: u64,
    ) -> Result<Vec<String>, StoreError> {
        let k = self.session_key_pair(id);
        let (offset, limit) = (offset.to_string(), limit.to_string());
        let args = Args {
            op: "page",
            arg: &offset,
            n: &limit,
            holder_label: "",
            keep_ms: "0",
        };
        let named = session_keys(&k);
        let done = self
            .run(Call {
                script: &SCRIPT,
                tag: id.as_str(),
                keys: &values(&named),
                args: &values(&args.named()),
                acks: None,
            })
            .await?;
        if int(&done.value, STATUS)? != 1 {
            return Err(bad_reply());
        }
        (2..done.value.len())
            .map(|i| text(&done.value, i).map(ToOwned::to_owned))
            .collect()
    }

    pub(in crate::store) async fn renew_attached(
        &self,
        owner: &OwnerToken,
        leases: &[(ResourceId, OperationId)],
        expires_at: StoreTime,
        now: StoreTime,
    ) -> Result<Vec<AttachedRenew>, StoreError> {
        // Batches: per slot on a Cluster (no script reads another slot's
        // key), else of any leases.
        let mut groups: BTreeMap<String, Vec<usize>> = BTreeMap::new();
        let cluster = matches!(self.backend, Backend::Cluster(_));
        for (i, (resource, _)) in leases.iter().enumerate() {
            let group = if cluster {
                super::super::cluster::key_slot(&resource.tag()).to_string()
            } else {
                String::new()
            };
            groups.entry(group).or_default().push(i);
        }
        let batches: Vec<&[usize]> = groups
            .values()
            .flat_map(|members| members.chunks(BATCH))
            .collect();
        let mut out = vec![AttachedRenew::Unsure; leases.len()];
        // IN_FLIGHT calls at a time: pipelined on the node's connections.
        for wave in batches.chunks(IN_FLIGHT) {
            let mut calls = Vec::with_capacity(wave.len());
            for batch in wave {
                calls.push(self.renew_batch(owner, leases, batch, expires_at, now));
            }
            for (batch, got) in wave.iter().zip(futures_util::future::join_all(calls).await) {
                for (&i, g) in batch.iter().zip(got?) {
                    out[i] = g;
                }
            }
        }
        Ok(out)
    }
}

impl RedisStore {
    /// One light renew call for `batch` (indexes into `leases`): a lease
    /// whose record this instance remembers is sent as that record and
    /// the next one (renewed at `now`), any other as its operation id
    /// with its record's and its index's keys (`lua/session_renew.lua`).
    async fn renew_batch(
        &self,
        owner: &OwnerToken,
        leases: &[(ResourceId, OperationId)],
        batch: &[usize],
        ends: StoreTime,
        now: StoreTime,
    ) -> Result<Vec<AttachedRenew>, StoreError> {
        let Some(&first) = batch.first() else {
            return Ok(Vec::new());
        };
        let mut keys = Vec::with_capacity(batch.len() * 2);
        let mut records = Vec::with_capacity(batch.len());
        // (what was written, what to write) where remembered.
        let mut sent = Vec::with_capacity(batch.len());
        // Every remembered record expires after this (the script renews
        // from memory only before it).
        let mut fresh_until = u64::MAX;
        for &i in batch {
            let (resource, op) = &leases[i];
            let record = keys::key(&self.namespace, "lease", resource);
            // Only this owner's own permit for the lease's operation: what
            // this instance last wrote there may be another session's.
            let pair = self
                .remembered
                .get(&record)
                .filter(|w| w.is_for(owner.expose(), op.as_str()))
                .and_then(|w| w.renewed(ends.0, now.0).map(|next| (w, next)));
            if let Some((w, _)) = &pair {
                fresh_until = fresh_until.min(w.expires_at);
            }
            records.push(keys.len());
            keys.push(record);
            if pair.is_none() {
                keys.push(keys::key(&self.namespace, "exp", resource));
            }
            sent.push(pair);
        }
        let (ends_text, fresh_until) = (
            ends.0.to_string(),
            if fresh_until == u64::MAX {
                0
            } else {
                fresh_until
            }
            .to_string(),
        );
        let mut args: Vec<&str> = Vec::with_capacity(3 + 2 * batch.len());
        args.extend([owner.expose(), &ends_text, &fresh_until]);
        for (&i, pair) in batch.iter().zip(&sent) {
            match pair {
                Some((w, next)) => args.extend([w.text(), next.text()]),
                // Nothing remembered: the operation id, an empty string.
                None => args.extend([leases[i].1.as_str(), ""]),
            }
        }
        let key_refs: Vec<&str> = keys.iter().map(String::as_str).collect();
        let tag = leases[first].0.tag();
        let done = self
            .run(Call {
                script: &RENEW,
                tag: &tag,
                keys: &key_refs,
                args: &args,
                acks: self.acks,
            })
            .await?;
        if int(&done.value, STATUS)? != 1 || done.value.len() != batch.len() + 2 {
            return Err(bad_reply());
        }
        let mut out = Vec::with_capacity(batch.len());
        for (j, pair) in sent.into_iter().enumerate() {
            let (got, next) = match done.value.get(j + 2) {
                // Renewed as remembered (or a permit, never remembered).
                Some(Value::Int(1)) => (AttachedRenew::Renewed, pair.map(|(_, next)| next)),
                Some(Value::Int(0)) => (AttachedRenew::Unsure, None),
                // Renewed, and here is the record written.
                Some(_) => (
                    AttachedRenew::Renewed,
                    remembered::Written::parse(text(&done.value, j + 2)?.to_owned()),
                ),
                None => return Err(bad_reply()),
            };
            self.remembered.set(&keys[records[j]], next, now.0);
            out.push(got);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_arguments_are_the_headers() {
        let k = [String::new(), String::new()];
        let args = Args {
            op: "",
            arg: "",
            n: "",
            holder_label: "",
            keep_ms: "",
        };
        super::super::header::assert_lists(
            lua::SESSION.entry,
            super::super::super::evalsha::names(&session_keys(&k)),
            super::super::super::evalsha::names(&args.named()),
        );
    }
}
