//! Shrinking a diverging program to a small one that still diverges: whole clients first,
//! then runs of a client's steps (a send with the waits after it) by halves and one by one,
//! then single messages of a send (with the ReadyForQuery its Query or Sync was owed). A
//! candidate that no longer runs against PostgreSQL (an unbalanced wait) is just rejected.

use super::program::{ClientProgram, Msg, Op, Program};

/// Shrinks `program` while `diverges` holds, calling it at most `budget` times.
pub fn shrink(
    program: &Program,
    budget: usize,
    mut diverges: impl FnMut(&Program) -> bool,
) -> Program {
    let mut best = program.clone();
    let mut calls = 0usize;
    let mut attempt = |candidate: &Program, calls: &mut usize| -> bool {
        if *calls >= budget {
            return false;
        }
        *calls += 1;
        diverges(candidate)
    };

    // Whole clients.
    let mut index = 0;
    while best.clients.len() > 1 && index < best.clients.len() {
        let mut candidate = best.clone();
        candidate.clients.remove(index);
        if attempt(&candidate, &mut calls) {
            best = candidate;
        } else {
            index += 1;
        }
    }

    // Runs of steps, per client.
    for client in 0..best.clients.len() {
        let mut granularity = 2usize;
        loop {
            let chunks = chunks(&best.clients[client]);
            if chunks.len() <= 1 {
                break;
            }
            let size = chunks.len().div_ceil(granularity).max(1);
            let mut removed_any = false;
            let mut start = 0;
            while start < chunks.len() {
                let end = (start + size).min(chunks.len());
                let mut candidate = best.clone();
                candidate.clients[client] = without_chunks(&best.clients[client], start, end);
                if candidate.clients[client].ops.is_empty() {
                    start = end;
                    continue;
                }
                if attempt(&candidate, &mut calls) {
                    best = candidate;
                    removed_any = true;
                    break;
                }
                start = end;
            }
            if removed_any {
                continue;
            }
            if size == 1 {
                break;
            }
            granularity *= 2;
        }
    }

    // Single messages of a send.
    for client in 0..best.clients.len() {
        let mut op = 0;
        while op < best.clients[client].ops.len() {
            let Op::Send(msgs) = &best.clients[client].ops[op] else {
                op += 1;
                continue;
            };
            let mut message = 0;
            let mut count = msgs.len();
            while message < count && count > 1 {
                let candidate_client = without_message(&best.clients[client], op, message);
                let mut candidate = best.clone();
                candidate.clients[client] = candidate_client;
                if attempt(&candidate, &mut calls) {
                    best = candidate;
                    count -= 1;
                } else {
                    message += 1;
                }
            }
            op += 1;
        }
    }
    best
}

/// A client's ops as runs: each send or terminate starts one, the waits after it follow.
fn chunks(client: &ClientProgram) -> Vec<(usize, usize)> {
    let mut runs = Vec::new();
    let mut start = 0;
    for (index, op) in client.ops.iter().enumerate() {
        let starts_run = matches!(op, Op::Send(_) | Op::Terminate);
        if starts_run && index > start {
            runs.push((start, index));
            start = index;
        }
    }
    if start < client.ops.len() {
        runs.push((start, client.ops.len()));
    }
    runs
}

fn without_chunks(client: &ClientProgram, from: usize, to: usize) -> ClientProgram {
    let runs = chunks(client);
    let (first, _) = runs[from];
    let (_, last) = runs[to - 1];
    let mut ops = client.ops.clone();
    ops.drain(first..last);
    ClientProgram { ops }
}

/// The client without message `message` of send `op`; a Query or Sync takes one of the
/// ReadyForQuery messages the next wait expects with it.
fn without_message(client: &ClientProgram, op: usize, message: usize) -> ClientProgram {
    let mut ops = client.ops.clone();
    let owed = match &mut ops[op] {
        Op::Send(msgs) => {
            let removed = msgs.remove(message);
            matches!(removed, Msg::Query(_) | Msg::Sync)
        }
        _ => false,
    };
    if owed
        && let Some(wait) = ops[op + 1..]
            .iter()
            .position(|op| matches!(op, Op::Ready(_)))
            .map(|offset| op + 1 + offset)
    {
        if let Op::Ready(count) = &mut ops[wait] {
            *count = count.saturating_sub(1);
            if *count == 0 {
                ops.remove(wait);
            }
        }
    }
    ClientProgram { ops }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(sql: &str) -> Op {
        Op::Send(vec![Msg::Query(sql.to_string())])
    }

    #[test]
    fn it_keeps_only_what_the_divergence_needs() {
        let program = Program {
            clients: vec![
                ClientProgram {
                    ops: vec![query("a"), Op::Ready(1), query("bad"), Op::Ready(1)],
                },
                ClientProgram {
                    ops: vec![query("c"), Op::Ready(1)],
                },
            ],
        };
        let bad = |program: &Program| program.to_text().contains("Q bad");
        let small = shrink(&program, 100, bad);
        assert_eq!(
            small,
            Program {
                clients: vec![ClientProgram {
                    ops: vec![query("bad"), Op::Ready(1)],
                }],
            }
        );
    }

    #[test]
    fn removing_a_query_takes_its_ready_with_it() {
        let client = ClientProgram {
            ops: vec![
                Op::Send(vec![Msg::Query("a".to_string()), Msg::Sync]),
                Op::Ready(2),
            ],
        };
        let smaller = without_message(&client, 0, 0);
        assert_eq!(smaller.ops, vec![Op::Send(vec![Msg::Sync]), Op::Ready(1)]);
    }
}
