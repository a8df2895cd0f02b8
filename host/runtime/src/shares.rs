//! Cache shares: which tenant gives up a block when one engine's cache is shared.
//!
//! Every cached block belongs to the tenant whose request stored it. The operator gives each
//! tenant a share of the cache in blocks: a guaranteed minimum and a limit (as cgroup's
//! `memory.min` and `memory.max`). When the engine must evict, the victim comes from the tenant
//! furthest past its limit, else furthest above its guarantee — and within that tenant, from the
//! evict-first end of the tenant's own policy's ranking. A tenant at or under its guarantee loses
//! a block only when no other tenant has one to give.
//!
//! The limit is applied when the engine must evict, not when a block is stored: a tenant above
//! its limit keeps its blocks while the cache has room nobody else wants, and is the first to
//! lose them when someone does. One definition, used by the simulator, the vLLM eviction service
//! and `agentrt serve`.

/// One tenant's share of the cache, in blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Share {
    /// Blocks the tenant keeps while any other tenant is above its own guarantee.
    pub min_blocks: u64,
    /// Blocks beyond which the tenant is evicted from before anyone under their limit.
    pub max_blocks: u64,
}

impl Share {
    /// No guarantee, no limit: the share of a tenant the operator did not name.
    pub const NONE: Share = Share {
        min_blocks: 0,
        max_blocks: u64::MAX,
    };

    /// Parse `MIN[:MAX]` (blocks).
    pub fn parse(text: &str) -> Result<Self, String> {
        let number = |s: &str, what: &str| {
            s.trim()
                .parse::<u64>()
                .map_err(|_| format!("{what} is not a whole number of blocks"))
        };
        let share = match text.split_once(':') {
            None => Share {
                min_blocks: number(text, "the guarantee")?,
                max_blocks: u64::MAX,
            },
            Some((min, max)) => Share {
                min_blocks: number(min, "the guarantee")?,
                max_blocks: number(max, "the limit")?,
            },
        };
        if share.max_blocks < share.min_blocks {
            return Err(format!(
                "the limit ({}) is below the guarantee ({})",
                share.max_blocks, share.min_blocks
            ));
        }
        Ok(share)
    }
}

/// One `--share TENANT=MIN_BLOCKS[:MAX_BLOCKS]` flag (`serve` and `sim` both take it). It splits
/// at the *last* `=`, as the tenant flags do, and the tenant must be a valid tenant name.
pub fn parse_tenant_share(text: &str) -> Result<(String, Share), String> {
    let (tenant, share) = text
        .rsplit_once('=')
        .ok_or_else(|| "expected TENANT=MIN_BLOCKS[:MAX_BLOCKS] (no `=` found)".to_string())?;
    crate::registry::validate_tenant_name(tenant)?;
    Ok((tenant.to_string(), Share::parse(share)?))
}

impl Default for Share {
    fn default() -> Self {
        Share::NONE
    }
}

/// What a tenant holds now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// Cached blocks it owns, in use or not.
    pub cached: u64,
    /// Of those, blocks the engine may evict now (cached and free).
    pub evictable: u64,
}

/// The tenant (index into `tenants`) the next victim comes from, or `None` when no tenant has an
/// evictable block. Ties go to the tenant holding more, then to the lower index.
pub fn victim_tenant(tenants: &[(Share, Usage)]) -> Option<usize> {
    tenants
        .iter()
        .enumerate()
        .filter(|(_, (_, usage))| usage.evictable > 0)
        .max_by(|(i, a), (j, b)| pressure(a).cmp(&pressure(b)).then(j.cmp(i)))
        .map(|(i, _)| i)
}

/// How strongly a tenant should give up a block: past its limit first (by how far), then by how
/// far above (or least below) its guarantee, then by size.
fn pressure((share, usage): &(Share, Usage)) -> (u64, i128, u64) {
    let over_limit = usage.cached.saturating_sub(share.max_blocks);
    let above_guarantee = i128::from(usage.cached) - i128::from(share.min_blocks);
    (over_limit, above_guarantee, usage.cached)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_share_flag_splits_at_the_last_equals_and_checks_the_tenant_name() {
        assert_eq!(
            parse_tenant_share("team-a=4096:8192"),
            Ok((
                "team-a".to_string(),
                Share {
                    min_blocks: 4096,
                    max_blocks: 8192
                }
            ))
        );
        assert_eq!(parse_tenant_share("b=10").unwrap().1.max_blocks, u64::MAX);
        assert!(parse_tenant_share("no-equals").unwrap_err().contains("TENANT=MIN"));
        assert!(parse_tenant_share("a/b=1").unwrap_err().contains("'/'"));
        assert!(parse_tenant_share("a=9:3").unwrap_err().contains("below the guarantee"));
    }

    fn usage(cached: u64, evictable: u64) -> Usage {
        Usage { cached, evictable }
    }

    fn share(min_blocks: u64, max_blocks: u64) -> Share {
        Share { min_blocks, max_blocks }
    }

    #[test]
    fn the_tenant_furthest_above_its_guarantee_gives_first() {
        let tenants = [
            (share(100, u64::MAX), usage(150, 10)),  // 50 above
            (share(0, u64::MAX), usage(40, 40)),     // 40 above
            (share(500, u64::MAX), usage(300, 300)), // under its guarantee
        ];
        assert_eq!(victim_tenant(&tenants), Some(0));
        // Once it is only 30 above, the other one gives.
        let tenants = [(tenants[0].0, usage(130, 10)), tenants[1], tenants[2]];
        assert_eq!(victim_tenant(&tenants), Some(1));
    }

    #[test]
    fn past_its_limit_a_tenant_gives_before_anyone_above_a_guarantee() {
        let tenants = [(share(0, u64::MAX), usage(900, 900)), (share(0, 100), usage(101, 1))];
        assert_eq!(victim_tenant(&tenants), Some(1));
    }

    #[test]
    fn a_tenant_under_its_guarantee_gives_only_when_no_one_else_can() {
        let tenants = [
            (share(1000, u64::MAX), usage(10, 10)),
            (share(0, u64::MAX), usage(500, 0)), // above, but nothing evictable
        ];
        assert_eq!(victim_tenant(&tenants), Some(0));
        let none = [(share(0, 5), usage(9, 0))];
        assert_eq!(victim_tenant(&none), None);
    }

    #[test]
    fn shares_parse_with_and_without_a_limit() {
        assert_eq!(Share::parse("64"), Ok(share(64, u64::MAX)));
        assert_eq!(Share::parse("64:128"), Ok(share(64, 128)));
        assert!(Share::parse("128:64").unwrap_err().contains("below the guarantee"));
        assert!(Share::parse("x").unwrap_err().contains("not a whole number"));
        assert!(Share::parse("1:y").unwrap_err().contains("the limit"));
    }
}
