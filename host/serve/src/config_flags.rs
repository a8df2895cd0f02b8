//! Every `agentrt serve` flag from the config file: the `[serve]` table of the file `--config`
//! names, whose keys are the flags' long names without `--`, its values as on the command line.
//!
//! ```toml
//! [serve]
//! upstream = "http://127.0.0.1:8000"
//! listen = "0.0.0.0:8080"
//! policy = "cachesage"
//! upstream-max-in-flight = 64        # a number for a number
//! no-engine-tags = true               # a switch: true sets it, false leaves it off
//! slot = ["guard=guard"]             # a repeatable flag takes a list (or one value)
//! ```
//!
//! One schema, the flags': the table is turned into command-line arguments and parsed by the
//! same definitions ([`crate::ServeArgs`]), so a flag added to `serve` is a key of the file
//! without further work, and the tests in this module fail if one is not. What wins, first
//! first: the command line, then a flag's environment variable (`AGENTRT_ADMIN_TOKEN`, …), then
//! the file, then the built-in default. A flag given on the command line replaces the file's
//! value whole, lists included.
//!
//! The table is read once, at start: a reload (SIGHUP, `POST /admin/reload`) re-reads the
//! tenants' tables only, and refuses a file whose `[serve]` changed
//! ([`crate::tenant::reload`]), so a file is never half in effect.
//!
//! A key spelled with `_` for `-` (`upstream_max_in_flight`) is read as the flag it names, with a
//! warning in the log ([`crate::tenant::config_warnings`]); an unknown key is an error naming it;
//! a value of the wrong shape or one the flag's parser refuses is an error naming the file and the
//! key.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use clap::parser::ValueSource;
use clap::{ArgAction, Command};

use crate::tenant::settings::ConfigFile;

/// The config file's table of `serve` flags.
pub const SERVE_TABLE: &str = "serve";

/// The flag that names the file; it cannot be set from the file itself.
const CONFIG_FLAG: &str = "config";

/// `argv` with the flags of the `[serve]` table of the file `--config` names appended, for the
/// flags the command line and the environment do not give. `cli` is the whole program's command
/// and `serve` the name of the subcommand whose flags the table sets; a command line that is not
/// that subcommand, has no `--config`, or does not parse comes back unchanged (the real parse
/// then reports what is wrong with it). The error names the file and, for a key, the key.
pub fn with_file_flags(cli: &Command, serve: &str, argv: Vec<OsString>) -> Result<Vec<OsString>, String> {
    let Some(serve_command) = cli.find_subcommand(serve) else {
        return Err(format!("the program has no `{serve}` subcommand"));
    };
    // Parse what was given with every flag optional: `--upstream` may come from the file.
    let relaxed = cli.clone().mut_subcommand(serve, relax);
    let Ok(matches) = relaxed.try_get_matches_from(&argv) else {
        return Ok(argv);
    };
    let Some(given) = matches.subcommand_matches(serve) else {
        return Ok(argv);
    };
    let Some(path) = given.get_one::<PathBuf>(CONFIG_FLAG) else {
        return Ok(argv);
    };
    let table = serve_table(path)?;
    let from_file = flags_of_table(serve_command, &table, path, |id| {
        matches!(
            given.value_source(id),
            Some(ValueSource::CommandLine | ValueSource::EnvVariable)
        )
    })?;
    let mut argv = argv;
    argv.extend(from_file);
    Ok(argv)
}

/// The `[serve]` table of the config file at `path` (empty without one). The whole file is
/// parsed, so a mistake in its tenants' tables is reported here too, before anything starts.
pub fn serve_table(path: &Path) -> Result<toml::Table, String> {
    Ok(ConfigFile::load(path)?.serve.unwrap_or_default())
}

/// Every argument of `command` optional, so that a partial command line parses.
fn relax(command: Command) -> Command {
    let ids: Vec<String> = command.get_arguments().map(|a| a.get_id().to_string()).collect();
    ids.iter()
        .fold(command, |command, id| command.mut_arg(id, |a| a.required(false)))
}

/// The command-line arguments (`--flag=value`, `--switch`) that `table` stands for, skipping
/// the flags `given_elsewhere` says the command line or the environment already set; each value
/// is checked by its flag's own parser. Errors name `path` and the key.
pub fn flags_of_table(
    command: &Command,
    table: &toml::Table,
    path: &Path,
    given_elsewhere: impl Fn(&str) -> bool,
) -> Result<Vec<OsString>, String> {
    let shown = path.display();
    let relaxed = relax(command.clone());
    let mut argv = Vec::new();
    for (key, value) in table {
        let at = format!("{shown}: [{SERVE_TABLE}] {key}");
        // `upstream_max_in_flight` is the old spelling of `upstream-max-in-flight`: still read
        // (the log says so, crate::tenant::config_warnings).
        let long = key.replace('_', "-");
        if long == CONFIG_FLAG {
            return Err(format!(
                "{at}: the config file cannot name another config file; give --config on the command line"
            ));
        }
        let Some(arg) = command
            .get_arguments()
            .find(|a| a.get_long() == Some(long.as_str()) && a.get_id() != CONFIG_FLAG)
        else {
            // Not `at`: only a key that is a flag's name is shown; another may be a secret.
            return Err(unknown_key(command, key, &shown.to_string()));
        };
        if given_elsewhere(arg.get_id().as_str()) {
            continue;
        }
        let flag = format!("--{long}");
        if !arg.get_action().takes_values() {
            // A switch: `true` turns it on; `false` is its default.
            match value {
                toml::Value::Boolean(true) => argv.push(OsString::from(&flag)),
                toml::Value::Boolean(false) => {}
                _ => {
                    return Err(format!(
                        "{at}: {flag} is a switch: write `{key} = true` or `{key} = false`"
                    ))
                }
            }
            continue;
        }
        let values: Vec<&toml::Value> = match value {
            toml::Value::Array(items) if matches!(arg.get_action(), ArgAction::Append) => items.iter().collect(),
            toml::Value::Array(_) => {
                return Err(format!("{at}: {flag} takes one value, not a list"));
            }
            one => vec![one],
        };
        for (i, value) in values.into_iter().enumerate() {
            let text = scalar_text(value).ok_or_else(|| {
                format!("{at}: {flag} takes a string, number or boolean, not a table or a list of lists")
            })?;
            let token = OsString::from(format!("{flag}={text}"));
            // The flag's own parser, run by clap on this one value.
            let parsed = relaxed
                .clone()
                .try_get_matches_from([OsString::from(command.get_name()), token.clone()]);
            if let Err(e) = parsed.as_ref().map(|_| ()).or_else(|e| other_than_a_value(e)) {
                let place = if table[key].is_array() {
                    format!("{at}[{i}]")
                } else {
                    at.clone()
                };
                return Err(format!("{place}: {}", refusal(e, &flag, &text)));
            }
            argv.push(token);
        }
    }
    Ok(argv)
}

/// The error for a key that is no flag. The key is named only when it is a near miss of a
/// flag's name (a typo): any other key may be a secret written on the wrong line.
fn unknown_key(command: &Command, key: &str, shown: &str) -> String {
    let listed = format!(
        "the keys of [{SERVE_TABLE}] are the long names of `agentrt serve`'s flags without `--` \
         (`agentrt serve --help` lists them)"
    );
    let dashed = key.replace('_', "-");
    let nearest = command
        .get_arguments()
        .filter_map(|a| a.get_long())
        .filter(|long| *long != CONFIG_FLAG)
        .map(|long| (edit_distance(&dashed, long), long))
        .min();
    match nearest {
        Some((distance, long)) if distance <= 2 => {
            format!("{shown}: [{SERVE_TABLE}] {key}: unknown key `{key}`: did you mean `{long}`? {listed}")
        }
        _ => format!(
            "{shown}: [{SERVE_TABLE}] has a key that is no flag's name (not shown: it may be a \
             secret written as a key); {listed}"
        ),
    }
}

/// The Levenshtein distance between `a` and `b`, in characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut current = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let substitution = previous[j] + usize::from(ca != *cb);
            current.push(substitution.min(previous[j + 1] + 1).min(current[j] + 1));
        }
        previous = current;
    }
    previous[b.len()]
}

/// Why `flag` refused a value of the file, in words that never repeat the value (`text`): clap's
/// own message quotes it, and a file's value may be a secret on the wrong line. A reason that
/// would still repeat it (a parser quoting its input) gives way to a plain one.
fn refusal(e: &clap::Error, flag: &str, text: &str) -> String {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    let plain = || format!("{flag} refuses this value (`agentrt serve --help` says what it takes)");
    let reason = match e.kind() {
        ErrorKind::InvalidValue => match e.get(ContextKind::ValidValue) {
            Some(ContextValue::Strings(valid)) => format!("{flag} takes one of {}", valid.join(", ")),
            _ => plain(),
        },
        _ => match std::error::Error::source(e) {
            Some(why) => format!("{flag}: {why}"),
            None => plain(),
        },
    };
    if repeats(&reason, text) {
        plain()
    } else {
        reason
    }
}

/// Whether `message` repeats `value`, or a piece of it long enough to matter (split where flag
/// values split: `=`, `:`, `,`, spaces).
fn repeats(message: &str, value: &str) -> bool {
    let long_enough = |piece: &&str| piece.chars().count() >= 4;
    std::iter::once(value)
        .chain(value.split(|c: char| matches!(c, '=' | ':' | ',') || c.is_whitespace()))
        .filter(long_enough)
        .any(|piece| message.contains(piece))
}

/// Whether the `[serve]` table `table` of the file at `path` would be accepted at start: every
/// key a flag's name, every value one its flag takes. A reload runs it too, so what the file
/// says is checked the same way whenever it is read, and named by key, never by value.
pub fn check_serve_table(table: &toml::Table, path: &Path) -> Result<(), String> {
    use clap::Args;
    let serve = crate::ServeArgs::augment_args(Command::new("serve"));
    flags_of_table(&serve, table, path, |_| false).map(|_| ())
}

/// A TOML scalar as it would be written on the command line.
fn scalar_text(value: &toml::Value) -> Option<String> {
    match value {
        toml::Value::String(s) => Some(s.clone()),
        toml::Value::Integer(n) => Some(n.to_string()),
        toml::Value::Float(x) => Some(x.to_string()),
        toml::Value::Boolean(b) => Some(b.to_string()),
        toml::Value::Datetime(d) => Some(d.to_string()),
        toml::Value::Array(_) | toml::Value::Table(_) => None,
    }
}

/// Ok for a parse error that is not about the value itself (a flag it requires is missing, one
/// it conflicts with is given): the real parse of the whole command line judges those.
fn other_than_a_value(e: &clap::Error) -> Result<(), &clap::Error> {
    use clap::error::ErrorKind::*;
    match e.kind() {
        InvalidValue | ValueValidation | InvalidUtf8 | WrongNumberOfValues | TooManyValues | TooFewValues
        | NoEquals => Err(e),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory, Parser};

    use super::*;
    use crate::ServeArgs;

    /// The program as the binary defines it: `agentrt serve` among other subcommands.
    #[derive(Parser)]
    #[command(name = "agentrt")]
    enum Agentrt {
        Serve(Box<ServeArgs>),
        /// Another subcommand, which the file never touches.
        Other,
    }

    fn parse(file: &str, command_line: &[&str]) -> Result<ServeArgs, String> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("agentrt.toml");
        std::fs::write(&path, file).unwrap();
        let argv: Vec<OsString> = ["agentrt", "serve", "--config", path.to_str().unwrap()]
            .iter()
            .chain(command_line)
            .map(OsString::from)
            .collect();
        let argv = with_file_flags(&Agentrt::command(), "serve", argv)?;
        match Agentrt::try_parse_from(argv).map_err(|e| e.to_string())? {
            Agentrt::Serve(args) => Ok(*args),
            Agentrt::Other => unreachable!(),
        }
    }

    #[test]
    fn a_file_setting_flags_takes_effect() {
        let args = parse(
            "[serve]\nupstream = \"http://10.0.0.1:8000\"\nlisten = \"0.0.0.0:9090\"\npolicy = \"lru\"\n\
             max-connections = 77\nwarmup-rate = 2.5\nno-engine-tags = true\nengine-priorities = false\n\
             slot = [\"guard=guard\", \"memo=tool-memo\"]\npolicy-config = \"ttl_ms=5\"\n\
             [tenants.alpha]\napi_keys = [\"k\"]\n",
            &[],
        )
        .unwrap();
        assert_eq!(args.upstream, "http://10.0.0.1:8000");
        assert_eq!(args.listen.to_string(), "0.0.0.0:9090");
        assert_eq!(args.policy, "lru");
        assert_eq!(args.limits.max_connections, 77);
        assert_eq!(args.warmup_rate, 2.5);
        assert!(args.no_engine_tags);
        assert!(!args.engine_priorities);
        assert_eq!(args.slots, ["guard=guard", "memo=tool-memo"]);
        assert_eq!(args.policy_config, ["ttl_ms=5"]);
    }

    #[test]
    fn a_command_line_flag_overrides_the_file_lists_included() {
        let file = "[serve]\nupstream = \"http://file:8000\"\nmax-connections = 77\nslot = [\"guard=guard\"]\n";
        let args = parse(file, &["--upstream", "http://cli:8000", "--slot", "memo=tool-memo"]).unwrap();
        assert_eq!(args.upstream, "http://cli:8000");
        assert_eq!(
            args.slots,
            ["memo=tool-memo"],
            "the command line's list replaces the file's"
        );
        assert_eq!(
            args.limits.max_connections, 77,
            "what the command line leaves out comes from the file"
        );
        // `--flag=value` on the command line counts as given too.
        let args = parse(file, &["--max-connections=5"]).unwrap();
        assert_eq!(args.limits.max_connections, 5);
    }

    #[test]
    fn an_unknown_key_is_an_error_naming_it() {
        let e = parse("[serve]\nupstream = \"http://x\"\nmax-conections = 5\n", &[]).unwrap_err();
        assert!(
            e.contains("[serve] max-conections: unknown key `max-conections`: did you mean `max-connections`?"),
            "{e}"
        );
        assert!(e.contains("agentrt.toml"), "the error names the file: {e}");
        // The old underscored spelling is the flag it names (the log warns).
        let args = parse("[serve]\nmax_connections = 5\n", &["--upstream", "http://x"]).unwrap();
        assert_eq!(args.limits.max_connections, 5);
        let e = parse("[serve]\nconfig = \"other.toml\"\n", &["--upstream", "http://x"]).unwrap_err();
        assert!(e.contains("cannot name another config file"), "{e}");
    }

    #[test]
    fn a_value_of_the_wrong_shape_or_refused_by_the_flag_is_an_error_naming_the_key() {
        let cases = [
            (
                "no-engine-tags = \"yes\"",
                "no-engine-tags: --no-engine-tags is a switch",
            ),
            (
                "policy = [\"lru\", \"ttl\"]",
                "policy: --policy takes one value, not a list",
            ),
            (
                "max-connections = \"many\"",
                "[serve] max-connections: --max-connections: is not a whole number",
            ),
            (
                "share = [\"alpha=10\", \"beta\"]",
                "[serve] share[1]: --share: expected TENANT=MIN_BLOCKS[:MAX_BLOCKS]",
            ),
            (
                "listen = { host = \"x\" }",
                "listen: --listen takes a string, number or boolean",
            ),
        ];
        for (line, expected) in cases {
            let e = parse(&format!("[serve]\nupstream = \"http://x\"\n{line}\n"), &[]).unwrap_err();
            assert!(e.contains(expected), "{line}: {e}");
        }
    }

    #[test]
    fn without_config_or_for_another_command_the_arguments_are_unchanged() {
        let argv: Vec<OsString> = ["agentrt", "serve", "--upstream", "http://x"]
            .iter()
            .map(OsString::from)
            .collect();
        assert_eq!(
            with_file_flags(&Agentrt::command(), "serve", argv.clone()).unwrap(),
            argv
        );
        let other: Vec<OsString> = ["agentrt", "other"].iter().map(OsString::from).collect();
        assert_eq!(
            with_file_flags(&Agentrt::command(), "serve", other.clone()).unwrap(),
            other
        );
    }

    #[test]
    fn a_missing_upstream_is_reported_by_the_real_parse() {
        let e = parse("[tenants.alpha]\napi_keys = [\"k\"]\n", &[]).unwrap_err();
        assert!(e.contains("--upstream"), "{e}");
    }

    /// A value each flag accepts, for the flags without a default: a flag added to `serve`
    /// without a default must get one here (the test below says which).
    fn sample_value(long: &str) -> Option<toml::Value> {
        let s = |v: &str| Some(toml::Value::String(v.to_string()));
        match long {
            "upstream" => s("http://127.0.0.1:8000"),
            "replica" => s("a=http://127.0.0.1:8000"),
            "upstream-api-key" | "admin-token" | "metrics-token" | "cache-salt-secret" => s("a-secret"),
            "policy-config" => s("ttl_ms=5"),
            "slot" => s("guard=guard"),
            "slot-config" => s("guard:limit=3"),
            "tenant-admin" => s("adm=alpha"),
            "tenant" => s("key=alpha"),
            "kv-events" | "kv-events-replay" | "router-kv-events" => s("tcp://127.0.0.1:5557"),
            "eviction-socket" => s("/run/agentrt/evict.sock"),
            "state-dir" => s("/var/lib/agentrt/state"),
            "eviction-socket-group" => s("agentrt"),
            "client-engine-field" => s("priority"),
            "share" => s("alpha=10:20"),
            "public-anchor" => s("3f9a0c1d2e4b5a69"),
            "replica-kv-events" => s("a=tcp://127.0.0.1:5557"),
            "replica-eviction-socket" => s("a=/run/agentrt/a.sock"),
            "router" => s("http://127.0.0.1:8092"),
            "mcp-server" => s("docs=http://127.0.0.1:9000/mcp"),
            "mcp-memo-config" => s("ttl_ms=5"),
            "mcp-memo-allow" | "mcp-memo-deny" => s("docs/search"),
            "mcp-allowed-host" => s("mcp.example"),
            "mcp-stdio-env" => s("PATH"),
            "kv-capacity-tokens" => Some(toml::Value::Integer(120_000)),
            _ => None,
        }
    }

    #[test]
    fn every_serve_flag_is_accepted_in_the_file() {
        let serve = Agentrt::command()
            .find_subcommand("serve")
            .expect("a serve subcommand")
            .clone();
        let mut missing = Vec::new();
        for arg in serve.get_arguments() {
            let Some(long) = arg.get_long() else {
                missing.push(format!("{} (no long name: the file cannot name it)", arg.get_id()));
                continue;
            };
            if long == CONFIG_FLAG {
                continue;
            }
            // A value the flag takes: a switch's `true`, its default, one of its possible values,
            // or the sample above.
            let value = if !arg.get_action().takes_values() {
                toml::Value::Boolean(true)
            } else if let Some(default) = arg.get_default_values().first() {
                toml::Value::String(default.to_string_lossy().into_owned())
            } else if let Some(possible) = arg.get_possible_values().first() {
                toml::Value::String(possible.get_name().to_string())
            } else if let Some(sample) = sample_value(long) {
                sample
            } else {
                missing.push(format!("--{long} (add a value it accepts to sample_value)"));
                continue;
            };
            let mut table = toml::Table::new();
            table.insert(long.to_string(), value);
            let flags = flags_of_table(&serve, &table, Path::new("agentrt.toml"), |_| false)
                .unwrap_or_else(|e| panic!("--{long} in the file: {e}"));
            // What the file gave reaches the flag, exactly as a command line would.
            let mut argv: Vec<OsString> = vec!["serve".into()];
            argv.extend(flags);
            let matches = relax(serve.clone())
                .try_get_matches_from(&argv)
                .unwrap_or_else(|e| panic!("--{long} from the file does not parse: {e}"));
            assert_eq!(
                matches.value_source(arg.get_id().as_str()),
                Some(ValueSource::CommandLine),
                "--{long} in the file did not set the flag"
            );
        }
        assert!(
            missing.is_empty(),
            "flags the test could not set from a file: {missing:#?}"
        );
    }
}
