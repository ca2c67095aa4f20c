#!/usr/bin/env python3
"""What Redis spends per EVALSHA part (issue 41, docs/perf-log/2026-12-06.md,
"folded layout"): a redis-server under callgrind on a free loopback port,
each line 300 runs (20 warm-up runs first) of one command, instructions per
run, the idle server's not taken off (about 1 k a line here). The minimal
lock's two commands, empty scripts by KEYS/ARGV count, single calls, and
the folded layout's acquire and release with constant strings (its calls
and arguments only, no logic), with the release's writes taken off one by
one. Last, the least any layout can do that keeps a fenced token and a
history entry per change written by Redis: an acquire of 2 keys and 2
arguments (`TIME`, `SET NX GET PX`) and a release of 2 keys and 1
argument (`TIME`, `GETDEL`, one `LPUSH` of both entries, `PEXPIRE`), with
no event, no sequence and no change count: with constant strings, then
with the least logic it needs (the token and the record made from TIME,
the owner checked, the entries and the hold's length made). The server
and its dumps are gone when it ends (benches/callgrind_redis.py). Needs
valgrind and redis-server.

    python3 benches/redis-call-floor.py
"""
import time
from callgrind_redis import Server
srv = Server('call-floor-')
c, ctl = srv.c, srv.ctl
ctl('-i', 'on')
N = 300
def measure(name, make):
    for i in range(20): make(10**6 + i)
    ctl('-z'); t0 = time.time()
    for i in range(N): make(i)
    w = time.time() - t0
    tot = srv.dump_total()
    print(f'{name:50s} {tot / N / 1000:7.1f} k (wall {w:.2f}s)')
K = lambda i, kind: f'leasehold:{kind}:v2:{{bench:v1.{i:064d}}}'
scripts = {}
def ev(body, nkeys, *a):
    if body not in scripts: scripts[body] = c.cmd('SCRIPT', 'LOAD', body)
    return c.cmd('EVALSHA', scripts[body], nkeys, *a)

P = 'p:' + 'A' * 32 + ':op-1'
REC = P + '|1796525770684965|1796525800684|1796525770684|1796525770684|30000|0|\x1c1:0|worker-7'
A7 = [P, '30000', 'worker-7', '100', '3600000', '', '197530']
A6 = [P, 'leasehold:wake:v2', 'bench:x', '100', '3600000', '197530']
def k3(i, n=0):
    return [K(i + n, 'lease'), K(i, 'seq'), K(i + n, 'hist')]
measure('PING', lambda i: c.cmd('PING'))
measure('minimal lock: SET NX PX', lambda i: c.cmd('SET', K(i, 'min'), 'tok' * 8, 'NX', 'PX', '30000'))
measure('minimal lock: compare-and-delete', lambda i: ev("if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0", 1, K(i, 'min'), 'tok' * 8))
measure('script `return 1`, 0 keys 0 args', lambda i: ev('return 1', 0))
measure('script `return 1`, 1 key 1 arg', lambda i: ev('return 1', 1, K(i, 'x'), 'a'))
measure('script `return 1`, 3 keys 7 args', lambda i: ev('return 1', 3, *k3(i), *A7))
measure('3 keys 7 args + TIME', lambda i: ev("redis.call('TIME') return 1", 3, *k3(i), *A7))
measure('3 keys 7 args + TIME + GET', lambda i: ev("redis.call('TIME') redis.call('GET', KEYS[2]) return 1", 3, *k3(i), *A7))
measure('1 key: tonumber x10', lambda i: ev("local x = 0 for j = 1, 10 do x = x + tonumber('1796525770684') end return 1", 1, K(i, 'x')))
measure('1 key: an 8-piece concat x10', lambda i: ev("local x for j = 1, 10 do x = 'p:AAAAAAAAAA:op-1' .. '|' .. j .. '|' .. '1796525770684' .. '|' .. '1796525770684' end return 1", 1, K(i, 'x')))
measure('1 key: string.match of a record x10', lambda i: ev("local x for j = 1, 10 do x = string.match('1796525770684965|1796525800684|1796525770684|1796525770684|30000|0|worker-7', '^(%d+)|(%d+)|(%d+)|%d+|%d+|0|()') end return 1", 1, K(i, 'x')))
measure('1 key: TIME x10', lambda i: ev("for j = 1, 10 do redis.call('TIME') end return 1", 1, K(i, 'x')))
measure('1 key: PEXPIRE of a missing key x10', lambda i: ev("for j = 1, 10 do redis.call('PEXPIRE', KEYS[1], '1000') end return 1", 1, K(i, 'x')))
acq = ("local t = redis.call('TIME') local s = redis.call('GET', KEYS[2]) "
       "redis.call('SET', KEYS[1], '" + REC + "', 'NX', 'GET', 'PX', ARGV[2]) "
       "return ARGV[5] .. ' 1796525770684965 1796525770684'")
measure('folded acquire, calls only (TIME, GET, SET NX GET), 3 keys 5 args', lambda i: ev(acq, 3, *k3(i, 50000), P, '30000', 'worker-7', '', '197530'))
SETSEQ = "redis.call('SET', KEYS[2], '1796525770684965:1:0:0', 'PX', ARGV[5])"
PEXP = "redis.call('PEXPIRE', KEYS[3], ARGV[5])"
PUB = "redis.call('PUBLISH', ARGV[2], 'bench:x\t1.0\treleased')"
rel = ("local t = redis.call('TIME') local cur = redis.call('GETDEL', KEYS[1]) " + PUB + " "
       "redis.call('LPUSH', KEYS[3], 'a|1796525770684|1796525770684965|1.1|worker-7', 'r|1796525770795|1796525770684965|1.0|worker-7') "
       + PEXP + " " + SETSEQ + " return ARGV[6] .. ' 111'")
measure('SET of the record alone (taken off the next four)', lambda i: c.cmd('SET', K(i + 90000, 'lease'), REC, 'PX', '30000'))
for n, (name, body) in enumerate([
        ('folded release, calls only (GETDEL, PUBLISH, LPUSH, PEXPIRE, SET seq)', rel),
        ('  the same without SET seq', rel.replace(SETSEQ, '')),
        ('  ... and without PEXPIRE', rel.replace(SETSEQ, '').replace(PEXP, '')),
        ('  ... and without PUBLISH', rel.replace(SETSEQ, '').replace(PEXP, '').replace(PUB, ''))]):
    def run(i, body=body, n=n):
        c.cmd('SET', K(i + 100000 * (n + 1), 'lease'), REC, 'PX', '30000')
        ev(body, 3, *k3(i, 100000 * (n + 1)), *A6)
    measure('SET record + ' + name, run)

# The least a lease with a fenced token and its history can cost Redis.
least_acq = ("redis.call('TIME') "
             "redis.call('SET', KEYS[1], '" + REC + "', 'NX', 'GET', 'PX', ARGV[2]) "
             "return '1 1796525770684965 1796525770684'")
least_rel = ("redis.call('TIME') redis.call('GETDEL', KEYS[1]) "
             "redis.call('LPUSH', KEYS[2], 'a|1796525770684|1796525770684965|worker-7', 'r|1796525770795|1796525770684965|worker-7') "
             "redis.call('PEXPIRE', KEYS[2], '3600000') return '1 111'")
measure('least: acquire (TIME, SET NX GET PX), 2 keys 2 args',
        lambda i: ev(least_acq, 2, K(i + 500000, 'lease'), K(i + 500000, 'hist'), P, '30000'))
def least_cycle(i):
    ev(least_acq, 2, K(i + 600000, 'lease'), K(i + 600000, 'hist'), P, '30000')
    ev(least_rel, 2, K(i + 600000, 'lease'), K(i + 600000, 'hist'), P)
measure('least: acquire + release (TIME, GETDEL, LPUSH, PEXPIRE)', least_cycle)
# The same with the least logic such a lease needs: the token and the
# record made from TIME, the owner checked and the record read on the
# release, both entries made, the hold's length made (no sequence, no
# change count, no event, no label or bound checks).
logic_acq = ("local t = redis.call('TIME') local us = t[2] "
             "if #us < 6 then us = string.sub('00000' .. us, -6) end "
             "local now = t[1] .. string.sub(us, 1, 3) local fence = t[1] .. us "
             "local cur = redis.call('SET', KEYS[1], ARGV[1] .. '|' .. fence .. '|' "
             ".. string.format('%d', tonumber(now) + tonumber(ARGV[2])) .. '|' .. now .. '|' .. now .. '|' "
             ".. ARGV[2] .. '|0|' .. ARGV[3], 'NX', 'GET', 'PX', ARGV[2]) "
             "if cur then return '0' end return '1 ' .. fence .. ' ' .. now")
logic_rel = ("local t = redis.call('TIME') local cur = redis.call('GETDEL', KEYS[1]) local n = #ARGV[1] "
             "if type(cur) ~= 'string' or string.sub(cur, 1, n) ~= ARGV[1] then return '6' end "
             "local fence, acq, at = string.match(cur, '^(%d+)|%d+|(%d+)|%d+|%d+|0|()', n + 2) "
             "local us = t[2] if #us < 6 then us = string.sub('00000' .. us, -6) end "
             "local now = t[1] .. string.sub(us, 1, 3) local label = string.sub(cur, at) "
             "redis.call('LPUSH', KEYS[2], 'a|' .. acq .. '|' .. fence .. '|' .. label, "
             "'r|' .. now .. '|' .. fence .. '|' .. label) "
             "redis.call('PEXPIRE', KEYS[2], '3600000') "
             "return '1 ' .. string.format('%d', tonumber(now) - tonumber(acq))")
def logic_cycle(i):
    ev(logic_acq, 2, K(i + 700000, 'lease'), K(i + 700000, 'hist'), P, '30000', 'worker-7')
    ev(logic_rel, 2, K(i + 700000, 'lease'), K(i + 700000, 'hist'), P)
measure('least + its logic: acquire + release', logic_cycle)
