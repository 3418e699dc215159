use tairlock::script::{CommandResult, Db, Reply, Script};

/// Reads `TIME`, then writes (and deletes) a scratch key, as the acquire script does; answers 1.
/// Lua: `probe_write.lua`.
pub static PROBE_WRITE: Script = Script::new(
    "legacy_probe_write",
    include_str!("probe_write.lua"),
    native,
);

fn native(_db: &mut Db, _keys: &[String], _args: &[String]) -> CommandResult<Reply> {
    // The embedded store replicates nothing: a write after reading the clock is always fine,
    // and the scratch key would be deleted in the same step anyway.
    Ok(Reply::Int(1))
}
