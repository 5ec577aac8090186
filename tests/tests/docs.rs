//! The commands the docs show agree with the programs' own help: every `nvc`,
//! `nvc-runtime`, `nvc-hook`, `nvc-bench` and `nvc-cri` command in a fenced shell block or
//! an inline code span of a Markdown file a reader reads (README.md, CONTRIBUTING.md,
//! docs/*.md, each folder's README.md) names only subcommands its `--help` lists and only
//! flags the help of that subcommand names; a script (`scripts/NAME.sh`,
//! `tests/gpu/NAME.sh`, `packaging/NAME.sh`) exists and takes each flag shown, as its
//! `--help` prints them or, for a script without one, as its text spells them (or as the
//! program it hands `"$@"` to takes them).
//!
//! nvc-runtime takes runc's command line and passes `--help` on to the runtime it execs,
//! so its commands are checked against that runtime's help; where it cannot be read (no
//! runc), they are listed as not checked. nvc-hook has no help: its first argument is a
//! mode, known when `nvc-hook MODE --help` does not answer "unknown hook mode", and that
//! answer names the mode's flags. A program shown without arguments is only looked for.
//!
//! Needs the built binaries (`cargo build --workspace`); nothing else: no root, no network.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::rc::Rc;
use std::time::Duration;

use nvc_tests::{run_command, workspace_bin};

fn repo() -> PathBuf {
    nvc_tests::repo_root().to_path_buf()
}

/// The programs whose commands are checked against their help.
const BINARIES: &[&str] = &["nvc", "nvc-runtime", "nvc-hook", "nvc-bench", "nvc-cri"];

/// Words that run the command after them (with their own `-x` options): `sudo nvc check`
/// is an `nvc` command.
const WRAPPERS: &[&str] = &[
    "sudo", "env", "exec", "time", "nohup", "command", "bash", "sh",
];

/// How long one `--help` may take.
const HELP_TIMEOUT: Duration = Duration::from_secs(20);

// ---------------------------------------------------------------------------------------
// The Markdown files a reader reads.

/// README.md and CONTRIBUTING.md at the root, docs/*.md, and the README.md of every
/// folder but build output, hidden folders, test data and fuzz corpora; sorted.
fn markdown_files(repo: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for name in ["README.md", "CONTRIBUTING.md"] {
        if repo.join(name).is_file() {
            files.push(repo.join(name));
        }
    }
    if let Ok(entries) = std::fs::read_dir(repo.join("docs")) {
        for entry in entries.flatten() {
            let path = entry.path();
            if path.extension().is_some_and(|e| e == "md") && path.is_file() {
                files.push(path);
            }
        }
    }
    let mut folders = vec![repo.to_path_buf()];
    while let Some(folder) = folders.pop() {
        let Ok(entries) = std::fs::read_dir(&folder) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if kind.is_dir() {
                let rel = path.strip_prefix(repo).unwrap_or(&path);
                let skipped = name.starts_with('.')
                    || ["target", "testdata", "node_modules"].contains(&name.as_str())
                    || rel.starts_with("fuzz/corpus")
                    || rel.starts_with("fuzz/artifacts");
                if !skipped {
                    folders.push(path);
                }
            } else if name == "README.md" && folder != repo {
                files.push(path);
            }
        }
    }
    files.sort();
    files.dedup();
    files
}

// ---------------------------------------------------------------------------------------
// Commands shown in Markdown.

/// A simple command shown in a Markdown file: the line it starts on and its words, with
/// quotes removed, a command substitution left as `$(…)` and redirections dropped.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Shown {
    line: usize,
    words: Vec<String>,
}

/// The labels of fenced blocks that hold shell commands.
const SHELL_LABELS: &[&str] = &["", "sh", "shell", "bash", "console"];

/// Every simple command shown in `markdown`: in fenced shell blocks (each line, its `\`
/// continuations joined, split at `|`, `&&`, `;` and `$(…)`) and in inline code spans.
fn extract(markdown: &str) -> Vec<Shown> {
    let lines: Vec<&str> = markdown.lines().collect();
    let mut shown = Vec::new();
    let mut paragraph: Vec<(usize, &str)> = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let trimmed = lines[i].trim_start();
        if let Some(fence) = fence_of(trimmed) {
            shown.extend(spans(&paragraph));
            paragraph.clear();
            let label = trimmed[fence.len()..]
                .split_whitespace()
                .next()
                .unwrap_or("")
                .to_ascii_lowercase();
            let mut block = Vec::new();
            i += 1;
            while i < lines.len() && !closes(lines[i].trim(), fence) {
                block.push((i + 1, lines[i]));
                i += 1;
            }
            i += 1;
            // An unlabelled block that draws (`──┤`, `─►`) is a diagram.
            let diagram = label.is_empty()
                && block.iter().any(|(_, l)| {
                    l.chars()
                        .any(|c| matches!(c, '\u{2190}'..='\u{21ff}' | '\u{2500}'..='\u{25ff}'))
                });
            if SHELL_LABELS.contains(&label.as_str()) && !diagram {
                shown.extend(block_commands(&block, label == "console"));
            }
            continue;
        }
        if trimmed.is_empty() {
            shown.extend(spans(&paragraph));
            paragraph.clear();
        } else {
            paragraph.push((i + 1, lines[i]));
        }
        i += 1;
    }
    shown.extend(spans(&paragraph));
    shown
}

/// The fence (three or more backquotes or tildes) that opens a block on this line.
fn fence_of(trimmed: &str) -> Option<&str> {
    let first = trimmed.chars().next().filter(|c| *c == '`' || *c == '~')?;
    let len = trimmed.chars().take_while(|c| *c == first).count();
    (len >= 3).then(|| &trimmed[..len])
}

/// Whether this (trimmed) line closes a block opened by `fence`.
fn closes(trimmed: &str, fence: &str) -> bool {
    let first = fence.chars().next().unwrap_or('`');
    trimmed.len() >= fence.len() && trimmed.chars().all(|c| c == first)
}

/// The commands of a fenced block. A transcript (a `console` block, or any block with a
/// `$ ` line) shows commands only after a prompt; its other lines are output.
fn block_commands(block: &[(usize, &str)], console: bool) -> Vec<Shown> {
    let transcript = console || block.iter().any(|(_, l)| l.trim_start().starts_with("$ "));
    let mut shown = Vec::new();
    let mut i = 0;
    while i < block.len() {
        let (line, first) = block[i];
        let mut text = first.trim().to_string();
        i += 1;
        while text.ends_with('\\') && i < block.len() {
            text.pop();
            text.push(' ');
            text.push_str(block[i].1.trim());
            i += 1;
        }
        let command = match strip_prompt(&text) {
            Some(rest) => rest,
            None if transcript => continue,
            None => &text,
        };
        shown.extend(
            commands(command)
                .into_iter()
                .map(|words| Shown { line, words }),
        );
    }
    shown
}

/// The command after a `$ ` prompt, or after a `# ` (root's) prompt when a known program
/// follows it; `None` for a line without a prompt.
fn strip_prompt(text: &str) -> Option<&str> {
    if let Some(rest) = text.strip_prefix("$ ") {
        return Some(rest);
    }
    let rest = text.strip_prefix("# ")?;
    let first = commands(rest).into_iter().next()?;
    let (program, _) = program_and_args(&first)?;
    is_known(program).then_some(rest)
}

/// The commands of the inline code spans of a paragraph (its lines and their numbers);
/// a span may run over lines.
fn spans(paragraph: &[(usize, &str)]) -> Vec<Shown> {
    let mut chars: Vec<(usize, char)> = Vec::new();
    for (line, text) in paragraph {
        chars.extend(text.chars().map(|c| (*line, c)));
        chars.push((*line, '\n'));
    }
    let run_at = |p: usize| chars[p..].iter().take_while(|(_, c)| *c == '`').count();
    let mut shown = Vec::new();
    let mut p = 0;
    while p < chars.len() {
        if chars[p].1 != '`' {
            p += 1;
            continue;
        }
        let open = run_at(p);
        let start = p + open;
        // The closing run: the next run of exactly as many backquotes.
        let mut q = start;
        let mut close = None;
        while q < chars.len() {
            if chars[q].1 == '`' {
                let run = run_at(q);
                if run == open {
                    close = Some(q);
                    break;
                }
                q += run;
            } else {
                q += 1;
            }
        }
        let Some(end) = close else {
            p = start;
            continue;
        };
        let text: String = chars[start..end]
            .iter()
            .map(|(_, c)| if *c == '\n' { ' ' } else { *c })
            .collect();
        let line = chars[p].0;
        shown.extend(
            commands(text.trim())
                .into_iter()
                .map(|words| Shown { line, words }),
        );
        p = end + open;
    }
    shown
}

/// The simple commands of one shell command line, as their words: split at `|`, `||`,
/// `&&`, `&`, `;` and parentheses; each `$(…)` or backquoted substitution is a command of
/// its own and a `$(…)` word in the command around it; `# comments` and redirections
/// (`> file`, `2>&1`) are dropped; a `<placeholder>` is one word.
fn commands(line: &str) -> Vec<Vec<String>> {
    let mut lexer = Lexer {
        chars: line.chars().collect(),
        pos: 0,
    };
    let mut out = Vec::new();
    lexer.list(false, &mut out);
    out
}

struct Lexer {
    chars: Vec<char>,
    pos: usize,
}

/// One command being read: its words, the word being read, and whether that word is a
/// redirection's target.
#[derive(Default)]
struct Partial {
    words: Vec<String>,
    word: Option<String>,
    redirect_target: bool,
}

impl Partial {
    fn word(&mut self) -> &mut String {
        self.word.get_or_insert_with(String::new)
    }

    fn end_word(&mut self) {
        if let Some(word) = self.word.take() {
            if !std::mem::take(&mut self.redirect_target) {
                self.words.push(word);
            }
        }
    }

    fn end_command(&mut self, out: &mut Vec<Vec<String>>) {
        self.end_word();
        self.redirect_target = false;
        if !self.words.is_empty() {
            out.push(std::mem::take(&mut self.words));
        }
    }
}

impl Lexer {
    fn peek(&self) -> Option<char> {
        self.chars.get(self.pos).copied()
    }

    fn next(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.pos += 1;
        Some(c)
    }

    /// Reads commands into `out` up to the end, or up to the `)` that ends a `$(` when
    /// `nested`.
    fn list(&mut self, nested: bool, out: &mut Vec<Vec<String>>) {
        let mut cmd = Partial::default();
        while let Some(c) = self.next() {
            match c {
                ' ' | '\t' | '\n' => cmd.end_word(),
                '#' if cmd.word.is_none() => {
                    while self.peek().is_some_and(|c| c != '\n') {
                        self.pos += 1;
                    }
                }
                '|' | ';' | '&' | '(' => cmd.end_command(out),
                ')' => {
                    cmd.end_command(out);
                    if nested {
                        return;
                    }
                }
                '\'' => {
                    let word = cmd.word();
                    while let Some(c) = self.next() {
                        if c == '\'' {
                            break;
                        }
                        word.push(c);
                    }
                }
                '"' => self.double_quoted(&mut cmd, out),
                '\\' => {
                    if let Some(c) = self.next() {
                        cmd.word().push(c);
                    }
                }
                '$' if self.peek() == Some('(') => {
                    self.pos += 1;
                    self.list(true, out);
                    cmd.word().push_str("$(…)");
                }
                '`' => {
                    let mut inner = String::new();
                    while let Some(c) = self.next() {
                        if c == '`' {
                            break;
                        }
                        inner.push(c);
                    }
                    out.extend(commands(&inner));
                    cmd.word().push_str("$(…)");
                }
                '<' if self.placeholder_ahead() => {
                    let word = cmd.word();
                    word.push('<');
                    while let Some(c) = self.next() {
                        word.push(c);
                        if c == '>' {
                            break;
                        }
                    }
                }
                '<' | '>' => {
                    // `2>` and `>`: the fd number is no word; the target is dropped.
                    if cmd
                        .word
                        .as_deref()
                        .is_some_and(|w| w.chars().all(|c| c.is_ascii_digit()))
                    {
                        cmd.word = None;
                    } else {
                        cmd.end_word();
                    }
                    while self.peek().is_some_and(|c| c == '>' || c == '&') {
                        self.pos += 1;
                    }
                    cmd.redirect_target = true;
                }
                _ => cmd.word().push(c),
            }
        }
        cmd.end_command(out);
    }

    /// After a `<`: a placeholder such as `<id>` or `<the script's max_len>` (a letter,
    /// then a `>` on the same line before any other `<`).
    fn placeholder_ahead(&self) -> bool {
        if !self.peek().is_some_and(|c| c.is_alphanumeric()) {
            return false;
        }
        for &c in &self.chars[self.pos..] {
            match c {
                '>' => return true,
                '<' | '\n' | '|' | ';' => return false,
                _ => {}
            }
        }
        false
    }

    /// Reads a double-quoted part of the current word (the opening quote read).
    fn double_quoted(&mut self, cmd: &mut Partial, out: &mut Vec<Vec<String>>) {
        cmd.word();
        while let Some(c) = self.next() {
            match c {
                '"' => return,
                '\\' => {
                    if let Some(c) = self.next() {
                        cmd.word().push(c);
                    }
                }
                '$' if self.peek() == Some('(') => {
                    self.pos += 1;
                    self.list(true, out);
                    cmd.word().push_str("$(…)");
                }
                _ => cmd.word().push(c),
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Which program a command runs.

/// What a shown command runs, as far as this suite checks it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Program {
    /// One of [`BINARIES`].
    Binary(&'static str),
    /// A script of the repository, by its path from the root.
    Script(PathBuf),
    /// A script path under `scripts/` or `tests/gpu/` that is not there.
    MissingScript(String),
}

/// The program word of a command and the words after it: leading `VAR=value`
/// assignments and wrappers such as `sudo` (with their options) skipped.
fn program_and_args(words: &[String]) -> Option<(&str, &[String])> {
    let mut i = 0;
    while i < words.len() {
        let word = words[i].as_str();
        let is_assignment = word.split_once('=').is_some_and(|(name, _)| {
            !name.is_empty()
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && !name.starts_with(|c: char| c.is_ascii_digit())
        });
        if is_assignment {
            i += 1;
        } else if WRAPPERS.contains(&word) {
            i += 1;
            while words.get(i).is_some_and(|w| w.starts_with('-')) {
                i += 1;
            }
        } else {
            return Some((word, &words[i + 1..]));
        }
    }
    None
}

/// Whether `word` names one of [`BINARIES`] (by any path) or a script.
fn is_known(word: &str) -> bool {
    binary(word).is_some() || script_path(word).is_some()
}

/// The binary `word` names: `nvc-hook`, or a path to it in a folder of programs
/// (`/usr/bin/nvc-hook`, `target/release/nvc-hook`, `.device-carry/bin/nvc-hook`), but
/// not a folder such as `/run/nvc`.
fn binary(word: &str) -> Option<&'static str> {
    let (folder, name) = word.rsplit_once('/').unwrap_or(("", word));
    let last = folder.rsplit('/').next().unwrap_or(folder);
    let of_programs = word == name || ["", ".", "bin", "sbin", "release", "debug"].contains(&last);
    BINARIES
        .iter()
        .find(|b| **b == name && of_programs)
        .copied()
}

/// The path from the root of a script `word` names (`./scripts/test.sh`,
/// `tests/gpu/e2e.sh`), or `None` when it names no script.
fn script_path(word: &str) -> Option<&str> {
    let path = word.strip_prefix("./").unwrap_or(word);
    (path.ends_with(".sh") && path.contains('/') && !path.starts_with('/')).then_some(path)
}

/// The program of `words` that this suite checks, and its arguments.
fn program(repo: &Path, words: &[String]) -> Option<(Program, Vec<String>)> {
    let (word, args) = program_and_args(words)?;
    let args = args.to_vec();
    if let Some(name) = binary(word) {
        return Some((Program::Binary(name), args));
    }
    let path = script_path(word)?;
    if repo.join(path).is_file() {
        Some((Program::Script(PathBuf::from(path)), args))
    } else if path.starts_with("scripts/") || path.starts_with("tests/gpu/") {
        Some((Program::MissingScript(path.to_string()), args))
    } else {
        None
    }
}

// ---------------------------------------------------------------------------------------
// What a program's help says.

/// What one `--help` lists.
#[derive(Debug, Default)]
struct Help {
    /// How it was asked for, for messages: `nvc cdi generate --help`.
    asked: String,
    /// Its subcommands (clap's `Commands:`, urfave's `COMMANDS:`), aliases included.
    commands: BTreeSet<String>,
    /// Every `--flag` it names, and the `-x` flags of its option lines.
    flags: BTreeSet<String>,
    /// The flags it shows with a value (`--root <DIR>`, `--log value`, `--runs N`).
    takes_value: BTreeSet<String>,
}

/// Whether `word`, after a flag in a help text, names its value.
fn is_value_name(word: &str) -> bool {
    let word = word.trim_end_matches(',');
    word.starts_with('<')
        || word == "value"
        || (word.chars().any(|c| c.is_ascii_uppercase())
            && word
                .chars()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || "_,.:-".contains(c)))
}

/// A flag at the start of `token` (`--output`, `-h,`), without what follows it.
fn flag_in(token: &str) -> Option<String> {
    let token = token.trim_start_matches(['(', '`', '"', '\'', '[']);
    let (dashes, body) = if let Some(body) = token.strip_prefix("--") {
        ("--", body)
    } else if let Some(body) = token.strip_prefix('-') {
        ("-", body)
    } else {
        return None;
    };
    let name: String = body
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
        .collect();
    let name = name.trim_end_matches('-');
    let valid = match dashes {
        "--" => name.starts_with(|c: char| c.is_ascii_alphanumeric()),
        _ => name.len() == 1 && name.starts_with(|c: char| c.is_ascii_alphabetic()),
    };
    valid.then(|| format!("{dashes}{name}"))
}

/// Reads a help text: clap's, urfave/cli's (runc's), or a hand-written usage.
fn parse_help(asked: &str, text: &str) -> Help {
    let mut help = Help {
        asked: asked.to_string(),
        ..Help::default()
    };
    let mut in_commands = false;
    for line in text.lines() {
        let trimmed = line.trim();
        if trimmed.eq_ignore_ascii_case("commands:") {
            in_commands = true;
            continue;
        }
        if in_commands {
            if trimmed.is_empty() || !line.starts_with(char::is_whitespace) {
                in_commands = false;
            } else {
                // `help, h     Shows a list…`: the name and its aliases.
                for token in trimmed.split_whitespace() {
                    help.commands
                        .insert(token.trim_end_matches(',').to_string());
                    if !token.ends_with(',') {
                        break;
                    }
                }
                continue;
            }
        }
        // An option line (`  -d, --devices <DEVICES>  Devices, …`): its flags and
        // their value up to the description, two spaces on; other lines name flags in
        // prose (`takes only --gpus <list>`).
        let option_line = trimmed.starts_with('-');
        let (definition, prose) = if option_line {
            trimmed.split_once("  ").unwrap_or((trimmed, ""))
        } else {
            ("", trimmed)
        };
        let tokens: Vec<&str> = definition.split_whitespace().collect();
        let mut defined = Vec::new();
        let mut takes_value = false;
        for (i, token) in tokens.iter().enumerate() {
            if let Some(flag) = flag_in(token) {
                takes_value |= token.contains("=<")
                    || tokens.get(i + 1).is_some_and(|next| is_value_name(next));
                defined.push(flag);
            }
        }
        if takes_value {
            help.takes_value.extend(defined.iter().cloned());
        }
        help.flags.extend(defined);
        // In prose only long flags count; a `-x` there may be anything.
        let tokens: Vec<&str> = prose.split_whitespace().collect();
        for (i, token) in tokens.iter().enumerate() {
            let Some(flag) = flag_in(token).filter(|f| f.starts_with("--")) else {
                continue;
            };
            if !option_line && tokens.get(i + 1).is_some_and(|next| is_value_name(next)) {
                help.takes_value.insert(flag.clone());
            }
            help.flags.insert(flag);
        }
    }
    help
}

/// Whether a word in a subcommand's place stands for one rather than names it: `<id>`,
/// `[OPTIONS]`, `ARGS...`, `COMMAND`, `$(…)`.
fn is_placeholder(word: &str) -> bool {
    word.starts_with(['<', '[', '{', '$'])
        || word.contains("...")
        || word.contains('…')
        || (word.chars().any(|c| c.is_ascii_uppercase())
            && word
                .chars()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || "_-.".contains(c)))
}

// ---------------------------------------------------------------------------------------
// The check.

/// What the check of one shown command found.
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    /// A command of a program this suite does not check.
    NotOurs,
    /// Checked: what disagrees with the help (nothing when all agrees).
    Checked(Vec<String>),
    /// A command of ours that cannot be checked here, and why.
    Unchecked(String),
}

/// A script's accepted flags: its `--help` (when it has one) or its text.
struct ScriptFlags {
    /// Where the flags were read, for messages: `scripts/bench.sh` or `` `bash
    /// scripts/x.sh --help` ``.
    source: String,
    /// That text (with the files the script sources).
    text: String,
    /// The binaries the script hands its own arguments to (`"$@"`): their flags are the
    /// script's too.
    forwards_to: Vec<&'static str>,
}

/// A help as [`Checker::help`] gives it.
type HelpFound = Result<Option<Rc<Help>>, String>;

/// Checks shown commands against the programs' help, asking each help once.
struct Checker {
    repo: PathBuf,
    io: tempfile::TempDir,
    helps: HashMap<(String, Vec<String>), HelpFound>,
    scripts: HashMap<PathBuf, Rc<ScriptFlags>>,
}

impl Checker {
    fn new(repo: &Path) -> Checker {
        Checker {
            repo: repo.to_path_buf(),
            io: tempfile::tempdir().unwrap(),
            helps: HashMap::new(),
            scripts: HashMap::new(),
        }
    }

    /// Runs a program with stdin from /dev/null and a time bound: (exited 0, stdout and
    /// stderr together).
    fn run(&self, command: &mut Command) -> (bool, String) {
        let outcome = run_command(command, self.io.path(), HELP_TIMEOUT);
        assert!(!outcome.timed_out, "{} did not end", outcome.command);
        (
            outcome.success(),
            format!("{}{}", outcome.stdout, outcome.stderr),
        )
    }

    /// The help of `program` `chain`: `Ok(None)` when `chain` is no command of it (only
    /// nvc-hook's modes are found so), `Err` when it cannot be read here.
    fn help(&mut self, program: &'static str, chain: &[String]) -> HelpFound {
        let key = (program.to_string(), chain.to_vec());
        if let Some(found) = self.helps.get(&key) {
            return found.clone();
        }
        let asked = format!("{program} {} --help", chain.join(" ")).replace("  ", " ");
        let found = if program == "nvc-hook" {
            if chain.is_empty() {
                // nvc-hook has no help: its first argument is a mode, and a mode's unknown
                // argument gets an error naming the arguments it takes.
                Ok(Some(Rc::new(Help {
                    asked,
                    ..Help::default()
                })))
            } else {
                // An NVC_CONFIG that cannot be read stops a mode that reads it before it
                // does anything (poststop).
                let mut command = Command::new(workspace_bin(program));
                command.args(chain).arg("--help").env("NVC_CONFIG", "/");
                let (_, text) = self.run(&mut command);
                if text.contains("unknown hook mode") {
                    Ok(None)
                } else {
                    // `unknown argument "--help"` is no flag of it.
                    let text = text.replace("\"--help\"", "");
                    Ok(Some(Rc::new(parse_help(&asked, &text))))
                }
            }
        } else {
            let mut command = Command::new(workspace_bin(program));
            command.args(chain).arg("--help");
            let (ok, text) = self.run(&mut command);
            if ok {
                let mut help = parse_help(&asked, &text);
                help.flags.insert("--help".to_string());
                Ok(Some(Rc::new(help)))
            } else {
                let first = text.lines().next().unwrap_or_default();
                Err(format!("`{asked}` failed: {first}"))
            }
        };
        self.helps.insert(key, found.clone());
        found
    }

    /// Checks one shown command.
    fn check(&mut self, words: &[String]) -> Verdict {
        let Some((program, args)) = program(&self.repo, words) else {
            return Verdict::NotOurs;
        };
        match program {
            // A program named alone: nothing to check but that it is built.
            Program::Binary(name) if args.is_empty() => {
                workspace_bin(name);
                Verdict::Checked(Vec::new())
            }
            Program::Binary(name) => {
                let mut problems = Vec::new();
                match self.walk(name, &[], &args, &mut problems) {
                    Ok(()) => Verdict::Checked(problems),
                    Err(why) => Verdict::Unchecked(why),
                }
            }
            Program::Script(path) => Verdict::Checked(self.check_script(&path, &args)),
            Program::MissingScript(path) => {
                Verdict::Checked(vec![format!("{path} does not exist")])
            }
        }
    }

    /// Checks `args` against the help of `program` `chain`, going down into the
    /// subcommands they name.
    fn walk(
        &mut self,
        program: &'static str,
        chain: &[String],
        args: &[String],
        problems: &mut Vec<String>,
    ) -> Result<(), String> {
        let Some(help) = self.help(program, chain)? else {
            return Ok(());
        };
        let modes = program == "nvc-hook" && chain.is_empty();
        let mut i = 0;
        while i < args.len() {
            let word = args[i].as_str();
            if word == "--" {
                // What follows is another program's.
                return Ok(());
            }
            if word.starts_with('-') && word.len() > 1 {
                if let Some(flag) =
                    flag_in(word).filter(|f| f.len() == word.len() || word.contains('='))
                {
                    if !help.flags.contains(&flag) {
                        problems.push(format!("{flag} is not in `{}`", help.asked));
                    } else if help.takes_value.contains(&flag) && !word.contains('=') {
                        i += 1;
                    }
                }
                i += 1;
                continue;
            }
            if help.commands.is_empty() && !modes {
                // An argument of a command that has no subcommands.
                i += 1;
                continue;
            }
            if is_placeholder(word) {
                // A subcommand's place holds a placeholder: no help to check the rest by.
                return Ok(());
            }
            // `generate/list` names both.
            let names: Vec<&str> = word.split('/').collect();
            let mut unknown = Vec::new();
            for name in &names {
                let known = if modes {
                    self.help(program, &[name.to_string()])?.is_some()
                } else {
                    help.commands.contains(*name)
                };
                if !known {
                    unknown.push(*name);
                }
            }
            if !unknown.is_empty() {
                for name in unknown {
                    problems.push(if modes {
                        format!(
                            "{name} is not a mode of nvc-hook \
                             (`nvc-hook {name} --help`: unknown hook mode)"
                        )
                    } else {
                        format!("{name} is not a command in `{}`", help.asked)
                    });
                }
                return Ok(());
            }
            for name in names {
                let sub = [chain, &[name.to_string()]].concat();
                self.walk(program, &sub, &args[i + 1..], problems)?;
            }
            return Ok(());
        }
        Ok(())
    }

    /// The flags `path` (from the root) accepts.
    fn script_flags(&mut self, path: &Path) -> Rc<ScriptFlags> {
        if let Some(found) = self.scripts.get(path) {
            return found.clone();
        }
        let file = self.repo.join(path);
        let own = std::fs::read_to_string(&file).unwrap_or_default();
        let shown = path.display().to_string();
        // A script that handles --help is asked for it; any other would run.
        let handles_help = ["--help)", "--help|", "|--help", "\"--help\""]
            .iter()
            .any(|p| own.contains(p));
        let asked = handles_help
            .then(|| {
                let mut command = Command::new("bash");
                command.arg(&file).arg("--help").current_dir(&self.repo);
                self.run(&mut command)
            })
            .filter(|(ok, text)| *ok && text.to_ascii_lowercase().contains("usage"));
        let mut text = own.clone();
        let mut source = shown.clone();
        if let Some((_, help)) = asked {
            text = help;
            source = format!("`bash {shown} --help`");
        } else {
            // The files it sources (`. "$(dirname "$0")/common.sh"`) are its text too.
            for line in own.lines() {
                let line = line.trim();
                if !(line.starts_with(". ") || line.starts_with("source ")) {
                    continue;
                }
                for token in line.split(['"', ' ', '/', '\'']) {
                    if token.ends_with(".sh") {
                        let sourced = file.with_file_name(token);
                        text.push_str(&std::fs::read_to_string(sourced).unwrap_or_default());
                    }
                }
            }
        }
        let joined = own.replace("\\\n", " ");
        let forwards_to = joined
            .lines()
            .filter(|l| l.contains("\"$@\"") && !l.trim_start().starts_with('#'))
            .flat_map(|l| l.split_whitespace().filter_map(binary).collect::<Vec<_>>())
            .collect();
        let flags = Rc::new(ScriptFlags {
            source,
            text,
            forwards_to,
        });
        self.scripts.insert(path.to_path_buf(), flags.clone());
        flags
    }

    /// Checks a script's shown flags: each must be in its --help or its text, or be a
    /// flag of a binary it hands its arguments to.
    fn check_script(&mut self, path: &Path, args: &[String]) -> Vec<String> {
        let flags = self.script_flags(path);
        let mut problems = Vec::new();
        for word in args {
            if word == "--" {
                break;
            }
            let Some(flag) = word.starts_with("--").then(|| flag_in(word)).flatten() else {
                continue;
            };
            if names_flag(&flags.text, &flag) {
                continue;
            }
            let forwarded = flags
                .forwards_to
                .iter()
                .any(|b| matches!(self.help(b, &[]), Ok(Some(help)) if help.flags.contains(&flag)));
            if !forwarded {
                problems.push(format!("{flag} is not in {}", flags.source));
            }
        }
        problems
    }
}

/// Whether `text` spells `flag` as a whole word (`--real`, not `--realm`).
fn names_flag(text: &str, flag: &str) -> bool {
    text.match_indices(flag).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + flag.len()..].chars().next();
        !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '-')
            && !after.is_some_and(|c| c.is_ascii_alphanumeric() || c == '-')
    })
}

/// The check of every command shown in `markdown` (named `name` in messages): the
/// mismatches as `NAME:LINE: COMMAND: what`, the commands not checkable here with why,
/// and how many were checked.
fn check_markdown(
    checker: &mut Checker,
    name: &str,
    markdown: &str,
) -> (Vec<String>, Vec<String>, usize) {
    let mut problems = Vec::new();
    let mut unchecked = Vec::new();
    let mut checked = 0;
    for shown in extract(markdown) {
        let command = shown.words.join(" ");
        match checker.check(&shown.words) {
            Verdict::NotOurs => {}
            Verdict::Checked(found) => {
                checked += 1;
                problems.extend(
                    found
                        .into_iter()
                        .map(|p| format!("{name}:{}: {command}: {p}", shown.line)),
                );
            }
            Verdict::Unchecked(why) => {
                unchecked.push(format!("{name}:{}: {command}: {why}", shown.line))
            }
        }
    }
    (problems, unchecked, checked)
}

#[test]
fn every_command_the_docs_show_agrees_with_its_help() {
    let repo = repo();
    let files = markdown_files(&repo);
    for needed in ["README.md", "docs/architecture.md", "cli/README.md"] {
        assert!(
            files.contains(&repo.join(needed)),
            "{needed} is not among the docs read: {files:?}"
        );
    }
    let mut checker = Checker::new(&repo);
    let mut problems = Vec::new();
    let mut unchecked = Vec::new();
    let mut checked = 0;
    for file in &files {
        let name = file.strip_prefix(&repo).unwrap().display().to_string();
        let text = std::fs::read_to_string(file).unwrap();
        let (p, u, c) = check_markdown(&mut checker, &name, &text);
        problems.extend(p);
        unchecked.extend(u);
        checked += c;
    }
    if !unchecked.is_empty() {
        eprintln!(
            "NOT CHECKED ({} commands):\n{}",
            unchecked.len(),
            unchecked.join("\n")
        );
    }
    assert!(
        checked >= 50,
        "only {checked} commands found in {} files: does the extractor still read the docs?",
        files.len()
    );
    assert!(
        problems.is_empty(),
        "{} of the {checked} commands the docs show disagree with their programs:\n{}",
        problems.len(),
        problems.join("\n")
    );
}

/// A subcommand, flag, mode or script that is not there is reported, each one, in the
/// form the suite's failure shows.
#[test]
fn what_is_not_there_is_reported() {
    let markdown = "\
Run `nvc frobnicate --now` or `nvc cdi generate --outptu x`.

```sh
nvc runtime configure --runtime docker --gpus-alias --colour   # a comment --ignored
nvc-hook cdi-links --link a::b --nope
nvc-hook frob
scripts/bench.sh --quick --runs 3 --no-such
scripts/nothing.sh
nvc list -d 0 -x
```
";
    let mut checker = Checker::new(&repo());
    let (problems, unchecked, checked) = check_markdown(&mut checker, "X.md", markdown);
    assert_eq!(unchecked, Vec::<String>::new());
    assert_eq!(checked, 8);
    assert_eq!(
        problems,
        [
            "X.md:1: nvc frobnicate --now: frobnicate is not a command in `nvc --help`",
            "X.md:1: nvc cdi generate --outptu x: --outptu is not in `nvc cdi generate --help`",
            "X.md:4: nvc runtime configure --runtime docker --gpus-alias --colour: \
             --colour is not in `nvc runtime configure --help`",
            "X.md:5: nvc-hook cdi-links --link a::b --nope: --nope is not in `nvc-hook cdi-links --help`",
            "X.md:6: nvc-hook frob: frob is not a mode of nvc-hook (`nvc-hook frob --help`: unknown hook mode)",
            "X.md:7: scripts/bench.sh --quick --runs 3 --no-such: --no-such is not in scripts/bench.sh",
            "X.md:8: scripts/nothing.sh: scripts/nothing.sh does not exist",
            "X.md:9: nvc list -d 0 -x: -x is not in `nvc list --help`",
        ]
    );
}

/// What agrees passes: flags with values (`--root S`, `--output=FILE`), alternatives
/// (`generate/list`), placeholders, a help flag, `--` ending the flags.
#[test]
fn what_agrees_passes() {
    let markdown = "\
`nvc cdi generate/list --device-name-strategy=index`, `nvc attach --root S ID --gpus 0`,
`nvc cdi generate --help`, `nvc <command>`, `nvc-bench --state 10,10000 --quick`,
`sudo target/release/nvc-bench --real`, `NVC_X=1 nvc check --bundle DIR`,
`nvc-hook prestart --gpus 0`, `nvc-hook poststop`, `tests/gpu/discovery.sh .device-carry/bin`.
";
    let mut checker = Checker::new(&repo());
    let (problems, unchecked, checked) = check_markdown(&mut checker, "X.md", markdown);
    assert_eq!(problems, Vec::<String>::new());
    assert_eq!(unchecked, Vec::<String>::new());
    assert_eq!(checked, 10);
}

// ---------------------------------------------------------------------------------------
// The extractor and the help reader, on literal text.

fn words(shown: &[Shown]) -> Vec<(usize, String)> {
    shown.iter().map(|s| (s.line, s.words.join(" "))).collect()
}

fn pairs(expected: &[(usize, &str)]) -> Vec<(usize, String)> {
    expected.iter().map(|(l, w)| (*l, w.to_string())).collect()
}

#[test]
fn a_fenced_block_gives_its_commands_without_comments() {
    let md = "text\n\n```sh\n# a comment\nnvc info --json   # what it shows\n\nnvc check\n```\n";
    assert_eq!(
        words(&extract(md)),
        pairs(&[(5, "nvc info --json"), (7, "nvc check")])
    );
}

#[test]
fn other_blocks_give_nothing() {
    let md = "```yaml\nnvc: info --x\n```\n```toml\nnvc = 1\n```\n~~~bash\nnvc list\n~~~\n";
    assert_eq!(words(&extract(md)), pairs(&[(8, "nvc list")]));
}

#[test]
fn a_continued_line_is_one_command_at_its_first_line() {
    let md = "```bash\nnvc-bench --real \\\n    --gpus 1,8 \\\n    --section gpu\nnvc info\n```\n";
    assert_eq!(
        words(&extract(md)),
        pairs(&[
            (2, "nvc-bench --real --gpus 1,8 --section gpu"),
            (5, "nvc info")
        ])
    );
}

#[test]
fn inline_spans_give_commands_even_over_two_lines() {
    let md = "Run `nvc check --bundle DIR` first, and ``nvc\nlist --json`` later; `x`.\n\n`y`\n";
    assert_eq!(
        words(&extract(md)),
        pairs(&[
            (1, "nvc check --bundle DIR"),
            (1, "nvc list --json"),
            (2, "x"),
            (4, "y")
        ])
    );
}

#[test]
fn a_transcript_gives_only_what_follows_a_prompt() {
    let md = "```console\n$ nvc info\nDriver version: 1\nnvc-hook: output\n# nvc list\n# a comment\n```\n";
    assert_eq!(
        words(&extract(md)),
        pairs(&[(2, "nvc info"), (5, "nvc list")])
    );
    // An unlabelled block with a `$ ` line is a transcript too.
    let md = "```\n$ nvc info\nnvc frobnicate\n```\n";
    assert_eq!(words(&extract(md)), pairs(&[(2, "nvc info")]));
}

#[test]
fn a_root_prompt_is_stripped_only_before_a_known_program() {
    assert_eq!(strip_prompt("# nvc list"), Some("nvc list"));
    assert_eq!(strip_prompt("# sudo nvc list"), Some("sudo nvc list"));
    assert_eq!(
        strip_prompt("# ./scripts/test.sh"),
        Some("./scripts/test.sh")
    );
    assert_eq!(strip_prompt("# add this, then:"), None);
    assert_eq!(strip_prompt("$ cargo build"), Some("cargo build"));
    assert_eq!(strip_prompt("nvc list"), None);
}

#[test]
fn env_assignments_and_wrappers_come_before_the_program() {
    let shown = commands("NVC_BENCH_RUNS=60 FOO=a=b sudo -E tests/gpu/check-and-bench.sh OUT");
    let (word, args) = program_and_args(&shown[0]).unwrap();
    assert_eq!(word, "tests/gpu/check-and-bench.sh");
    assert_eq!(args, ["OUT".to_string()]);
    let repo = repo();
    assert_eq!(
        program_and_args(&commands("/usr/bin/nvc-hook poststop")[0]).map(|(p, _)| binary(p)),
        Some(Some("nvc-hook"))
    );
    assert_eq!(
        program(&repo, &commands(".device-carry/bin/nvc-bench --quick")[0]),
        Some((Program::Binary("nvc-bench"), vec!["--quick".to_string()]))
    );
    assert_eq!(
        program(&repo, &commands("./scripts/test.sh")[0]),
        Some((Program::Script(PathBuf::from("scripts/test.sh")), vec![]))
    );
    assert_eq!(
        program(&repo, &commands("cp target/release/nvc /usr/bin/")[0]),
        None
    );
    assert_eq!(program(&repo, &commands("/run/nvc")[0]), None);
    assert_eq!(binary("./nvc"), Some("nvc"));
    assert_eq!(binary("target/debug/nvc-cri"), Some("nvc-cri"));
}

#[test]
fn pipes_lists_and_substitutions_split_a_line() {
    let split: Vec<String> = commands(
        "cd x && nvc list --json | jq . ; nvc attach \"$(docker inspect -f '{{.Id}}' web)\" --gpus 0 2>&1 >/dev/null || echo `nvc info`",
    )
    .iter()
    .map(|w| w.join(" "))
    .collect();
    assert_eq!(
        split,
        [
            "cd x",
            "nvc list --json",
            "jq .",
            "docker inspect -f {{.Id}} web",
            "nvc attach $(…) --gpus 0",
            "nvc info",
            "echo $(…)",
        ]
    );
}

#[test]
fn placeholders_and_redirections_are_words_or_dropped() {
    let split: Vec<String> =
        commands("nvc attach <container id> --gpus 0 --out x/<name>.md > out.txt 2>err")
            .iter()
            .map(|w| w.join("|"))
            .collect();
    assert_eq!(
        split,
        ["nvc|attach|<container id>|--gpus|0|--out|x/<name>.md"]
    );
    assert!(is_placeholder("<id>"));
    assert!(is_placeholder("ARGS..."));
    assert!(is_placeholder("OUT_DIR"));
    assert!(is_placeholder("..."));
    assert!(!is_placeholder("frobnicate"));
}

#[test]
fn a_clap_help_gives_commands_flags_and_values() {
    let help = parse_help(
        "x --help",
        "Usage: x <COMMAND>\n\nCommands:\n  info     Show it\n  cdi      CDI\n  help     Print\n\n\
         Options:\n  -d, --devices <DEVICES>  Devices (see --json)\n      --json  Print JSON\n  -h, --help  Print help\n",
    );
    assert_eq!(
        help.commands,
        ["cdi", "help", "info"].map(String::from).into()
    );
    assert_eq!(
        help.flags,
        ["--devices", "--help", "--json", "-d", "-h"]
            .map(String::from)
            .into()
    );
    assert_eq!(
        help.takes_value,
        ["--devices", "-d"].map(String::from).into()
    );
}

#[test]
fn an_urfave_help_gives_commands_with_aliases_and_values() {
    let help = parse_help(
        "runc --help",
        "COMMANDS:\n   create      create a container\n   help, h     Shows help\n\n\
         GLOBAL OPTIONS:\n   --root value        root directory\n   --debug             enable\n   \
         --help, -h          show help\n",
    );
    assert_eq!(
        help.commands,
        ["create", "h", "help"].map(String::from).into()
    );
    assert_eq!(help.takes_value, ["--root"].map(String::from).into());
    assert!(help.flags.contains("--debug") && help.flags.contains("-h"));
}

#[test]
fn a_hand_written_usage_gives_its_flags_and_values() {
    let help = parse_help(
        "b --help",
        "usage: b [OPTIONS]\n\n  --runs N    runs\n  --state N,M  state\n  --real      the host's\n",
    );
    assert_eq!(
        help.takes_value,
        ["--runs", "--state"].map(String::from).into()
    );
    assert!(help.flags.contains("--real"));
}

#[test]
fn a_script_with_a_help_is_checked_against_it_and_one_without_against_its_text() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("scripts")).unwrap();
    std::fs::write(
        dir.path().join("scripts/helped.sh"),
        "case \"$1\" in\n  -h|--help) echo 'usage: helped.sh [--fast]'; exit 0 ;;\n  --hidden) ;;\nesac\nexit 1\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("scripts/plain.sh"),
        ". \"$(dirname \"$0\")/lib.sh\"\n[ \"$1\" = --fast ] && exit 0\n",
    )
    .unwrap();
    std::fs::write(dir.path().join("scripts/lib.sh"), "# takes --slow too\n").unwrap();
    let mut checker = Checker::new(dir.path());
    let md = "`scripts/helped.sh --fast --hidden` `./scripts/plain.sh --fast --slow --faster`\n";
    let (problems, _, checked) = check_markdown(&mut checker, "X.md", md);
    assert_eq!(checked, 2);
    assert_eq!(
        problems,
        [
            "X.md:1: scripts/helped.sh --fast --hidden: --hidden is not in `bash scripts/helped.sh --help`",
            "X.md:1: ./scripts/plain.sh --fast --slow --faster: --faster is not in scripts/plain.sh",
        ]
    );
}
