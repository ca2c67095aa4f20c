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
import hashlib, os, shutil, socket, subprocess, sys, tempfile, time
for tool in ('valgrind', 'callgrind_control', 'redis-server'):
    if not shutil.which(tool):
        sys.exit(f'missing {tool}: apt-get install valgrind redis-server')
lua_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lua')
N = int(sys.argv[2]) if len(sys.argv) > 2 else 300
def resp(*a):
    out = b'*%d\r\n' % len(a)
    for x in a:
        x = x if isinstance(x, bytes) else str(x).encode()
        out += b'$%d\r\n%s\r\n' % (len(x), x)
    return out
class C:
    def __init__(s, port):
        s.s = socket.create_connection(('127.0.0.1', port)); s.f = s.s.makefile('rb')
    def cmd(s, *a):
        s.s.sendall(resp(*a)); return s.read()
    def read(s):
        l = s.f.readline()
        t, r = l[:1], l[1:-2]
        if t == b'+': return r.decode()
        if t == b'-': raise RuntimeError(r.decode())
        if t == b':': return int(r)
        if t == b'$':
            n = int(r)
            if n < 0: return None
            d = s.f.read(n + 2); return d[:-2].decode()
        if t == b'*':
            n = int(r)
            return None if n < 0 else [s.read() for _ in range(n)]
        raise RuntimeError(l)
s = socket.socket(); s.bind(('127.0.0.1', 0)); port = s.getsockname()[1]; s.close()
d = tempfile.mkdtemp(prefix='cost2-scripts-')
vg = subprocess.Popen(['valgrind', '--tool=callgrind', '--instr-atstart=no', f'--callgrind-out-file={d}/cg.out',
    'redis-server', '--port', str(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', d],
    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
c = None
for _ in range(600):
    try:
        c = C(port); c.cmd('PING'); break
    except Exception:
        c = None; time.sleep(0.1)
if c is None:
    vg.terminate(); sys.exit('redis-server under callgrind did not start within 60 s')
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
def ctl(*a): subprocess.run(['callgrind_control', *a, str(vg.pid)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
def total(n):
    t = open(f'{d}/cg.out.{n}').read()
    for l in t.splitlines():
        if l.startswith('totals:') or l.startswith('summary:'): return int(l.split()[1])
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
w = time.time() - t0; ctl('-d'); ctl('-z'); t1 = time.time(); time.sleep(2); ctl('-d'); idle = total(2) / (time.time() - t1)
busy = total(1) - idle * w
print(f'{lua_dir}: {busy / N / 1000:.1f} k Redis instructions per acquire + ' + (f'renew x{RENEWS} + ' if RENEWS else '') + f'release ({N} cycles, idle {idle:.0f}/s taken off; ' + ('slim scripts, misses ' + str(misses) if slim else 'general scripts only') + ')' + (f'; dumps in {d}' if os.environ.get('LOAD_KEEP_LOGS') else ''))
vg.terminate(); vg.wait()
if not os.environ.get('LOAD_KEEP_LOGS'):
    import shutil; shutil.rmtree(d, ignore_errors=True)
