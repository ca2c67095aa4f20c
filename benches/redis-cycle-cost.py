#!/usr/bin/env python3
"""Redis instructions per plain acquire + release, the scripts run directly
(no service, no cargo build): for trying a change to lua/ in seconds.

    python3 benches/redis-cycle-cost.py [LUA_DIR] [CYCLES]

LUA_DIR (default: this tree's lua/) holds acquire.lua and release.lua;
their `--#include` lines are spliced as src/store/redis/lua.rs splices
them (each piece once, where first included). A redis-server runs under
callgrind (instrumentation off until the cycles start) on a free loopback
port; 20 warm-up cycles, then CYCLES (300) cycles on fresh resources, each
the EVALSHAs the service sends for a plain lease (holder `worker-7`,
TTL 30 s, history 100 entries / one hour, nobody watching): the slim
scripts (plain_*.lua, when LUA_DIR has them), and the general script
after a slim one's status 6. RENEWS=N adds N renews to each cycle,
ONLY=renew counts N renews of held leases alone, GENERAL_ONLY=1 sends
the general scripts only. The
instructions Redis spends idle over the same time (measured right after)
are taken off. The same figure as `cargo bench --bench load -- --only
redis-cost` within a few thousand (the service adds the purposes
registry's reads). Needs valgrind and redis-server.
"""
import hashlib, os, sys, time
from callgrind_redis import Server
lua_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lua')
N = int(sys.argv[2]) if len(sys.argv) > 2 else 300
srv = Server('cost2-scripts-')
c, d, ctl = srv.c, srv.dir, srv.ctl
def assemble(name, done):
    out = []
    for line in open(os.path.join(lua_dir, name)).read().splitlines(keepends=True):
        if line.startswith('--#include '):
            piece = line[len('--#include '):].strip()
            if piece not in done:
                done.add(piece)
                out.append(assemble(piece, done))
        else:
            out.append(line)
    return ''.join(out)
def load(name):
    src = assemble(name, set())
    return c.cmd('SCRIPT', 'LOAD', src)
acq, rel, ren = load('acquire.lua'), load('release.lua'), load('renew.lua')
slim = os.path.exists(os.path.join(lua_dir, 'plain_acquire.lua')) and not os.environ.get('GENERAL_ONLY')
if slim:
    pacq, prel, pren = load('plain_acquire.lua'), load('plain_release.lua'), load('plain_renew.lua')
owner = 'A' * 32; ns = 'leasehold'; NONCE = 12345; MISS = NONCE * 16 + 15
misses = {'acquire': 0, 'renew': 0, 'release': 0}
def ok(r, status):
    want = str(NONCE * 16 + status + 9)
    if isinstance(r, list) and r and isinstance(r[0], str):
        r = r[0]  # a packed head, then other items (plain_renew.lua)
    elif isinstance(r, list):
        return r and r[0] == int(want)
    return isinstance(r, str) and (r == want or r.startswith(want + ' '))
def missed(r, verb):
    if slim and r == str(MISS):
        misses[verb] += 1
        return True
    return not slim
def keys_of(i, salt):
    dg = 'v1.' + hashlib.sha256(f'{salt}-{i}'.encode()).hexdigest(); T = '{bench:%s}' % dg
    op = f'op-{salt}-{i}'
    k = lambda kind: f'{ns}:{kind}:v2:{T}'
    return T, op, k, k('claim') + f':p:{owner}:{op}'
def acquire(i, salt):
    T, op, k, claim = keys_of(i, salt)
    r = slim and c.cmd('EVALSHA', pacq, 3, k('lease'), k('seq'), k('hist'), f'p:{owner}:{op}', '30000', 'worker-7', '100', '3600000', '', NONCE * 16 + 10)
    if missed(r, 'acquire'):
        r = c.cmd('EVALSHA', acq, 8, k('lease'), k('seq'), k('hist'), k('exp'), k('queue'), k('ask'), claim, k('granted'),
                  owner, op, '30000', 'worker-7', '', '100', '3600000', '', NONCE)
    assert ok(r, 1), r
def renew(i, salt):
    T, op, k, claim = keys_of(i, salt)
    r = slim and c.cmd('EVALSHA', pren, 1, k('lease'), f'p:{owner}:{op}', '30000', NONCE * 16 + 10)
    if missed(r, 'renew'):
        r = c.cmd('EVALSHA', ren, 5, k('lease'), k('seq'), k('tomb'), k('exp'), k('hist'),
                  owner, op, '30000', '', '3600000', f'{ns}:wake:v2', T[1:-1], '100', '3600000', '', NONCE)
    assert ok(r, 1), r
def release(i, salt):
    T, op, k, claim = keys_of(i, salt)
    r = slim and c.cmd('EVALSHA', prel, 3, k('lease'), k('seq'), k('hist'), f'p:{owner}:{op}', f'{ns}:wake:v2', T[1:-1], '100', '3600000', NONCE * 16 + 10)
    if missed(r, 'release'):
        r = c.cmd('EVALSHA', rel, 9, k('lease'), k('seq'), k('tomb'), k('hist'), k('exp'), k('queue'), k('ask'), claim, k('granted'),
                  owner, op, f'{ns}:wake:v2', T[1:-1], '', '100', '3600000', 'i1', NONCE)
    assert ok(r, 1), r
def cycle(i, salt):
    acquire(i, salt)
    for _ in range(RENEWS):
        renew(i, salt)
    release(i, salt)
RENEWS = int(os.environ.get('RENEWS', '0'))
ctl('-i', 'on')
for i in range(20): cycle(i, 'warm')
ONLY = os.environ.get('ONLY')  # 'renew': N renews of N held leases are counted, nothing else
if ONLY == 'renew':
    for i in range(N): acquire(i, 'run')
ctl('-z'); t0 = time.time()
for i in range(N):
    if ONLY == 'renew':
        renew(i, 'run')
    else:
        cycle(i, 'run')
w = time.time() - t0; busy = srv.dump_total(); ctl('-z'); t1 = time.time(); time.sleep(2); idle = srv.dump_total() / (time.time() - t1)
busy -= idle * w
what = 'renew' if ONLY == 'renew' else 'acquire + ' + (f'renew x{RENEWS} + ' if RENEWS else '') + 'release'
print(f'{lua_dir}: {busy / N / 1000:.1f} k Redis instructions per {what} ({N} runs, idle {idle:.0f}/s taken off; ' + ('slim scripts, misses ' + str(misses) if slim else 'general scripts only') + ')' + (f'; dumps in {d}' if os.environ.get('LOAD_KEEP_LOGS') else ''))
