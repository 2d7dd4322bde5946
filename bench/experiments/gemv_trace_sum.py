# Summarizes the stamps of bench/experiments/gemv_trace.patch (LITHE_GEMV_TRACE): the last decode
# step's GEMV launches in time order, times relative to the previous GEMV launch's last block exit.
import sys, statistics as st
L = []
cur = None
for line in open(sys.argv[1]):
    p = line.split()
    if p[0] == 'L':
        cur = dict(slot=int(p[1]), grid=int(p[2]), ks=int(p[3]), cl=int(p[4]), m=int(p[5]), epi=int(p[6]),
                   nm=int(p[7]), n_out=int(p[8]), n_in=int(p[9]), seq=int(p[10]), b=[])
        L.append(cur)
    else:
        cur['b'].append([int(v) for v in p])
L = [l for l in L if l['b'] and min(b[1] for b in l['b']) > 0]
for l in L:
    bs = l['b']
    l['t0'] = min(b[1] for b in bs); l['t4'] = max(b[5] for b in bs)
L.sort(key=lambda l: l['t0'])
# the last step: walk back from the end while launches follow within 200 us
step = [L[-1]]
for l in reversed(L[:-1]):
    if step[0]['t0'] - l['t4'] > 200_000: break
    step.insert(0, l)
print(f"launches in last step: {len(step)}; span {(step[-1]['t4'] - step[0]['t0']) / 1000:.1f} us")
# timer resolution
vals = sorted({b[2] for b in step[len(step)//2]['b']})
d = [y - x for x, y in zip(vals, vals[1:]) if y > x]
print("smallest stamp step (ns):", min(d) if d else None)
name = {(3, 4096): 'qkv', (1, 4096): 'o', (2, 4096): 'gate/up', (1, 11008): 'down'}
rows = {}
prev = None
det = []
for l in step:
    bs = l['b']
    E = prev['t4'] if prev else l['t0']
    key = name.get((l['nm'], l['n_in']), f"{l['nm']}x{l['n_out']}x{l['n_in']}")
    t1 = [b[2] for b in bs]; t2 = [b[3] for b in bs]; t3 = [b[4] for b in bs]; t4 = [b[5] for b in bs]
    r = dict(
        start=(l['t0'] - E) / 1e3,
        early=sum(1 for b in bs if b[1] < E),
        wait=(min(t1) - E) / 1e3,
        wait_max=(max(t1) - E) / 1e3,
        staged=(max(t2) - min(t1)) / 1e3,
        loop_med=st.median(b[4] - b[2] for b in bs) / 1e3,
        loop_max=(max(t3) - min(t1)) / 1e3,
        red=(max(t4) - max(t3)) / 1e3,
        end=(l['t4'] - E) / 1e3,
        dur=(l['t4'] - l['t0']) / 1e3,
        sms=len({b[0] for b in bs}))
    rows.setdefault(key, []).append(r)
    det.append((key, l['grid'], l['ks'], l['cl'], r))
    prev = l
cols = ['start', 'early', 'wait', 'wait_max', 'staged', 'loop_med', 'loop_max', 'red', 'end', 'dur', 'sms']
print("times in us relative to the previous GEMV launch's last block end (E); medians over the step's launches")
print("launch      n   " + " ".join(f"{c:>8}" for c in cols))
for k, rs in rows.items():
    print(f"{k:10} {len(rs):3}   " + " ".join(f"{st.median(r[c] for r in rs):8.2f}" for c in cols))
print("sum of 'end' over the step (us):", round(sum(r['end'] for _, _, _, _, r in det), 1))
print("first 10 launches of the step in detail:")
for key, g, ks, cl, r in det[4:14]:
    print(f"{key:10} grid {g:4} ks {ks} cl {cl}  " + " ".join(f"{c}={r[c]:.2f}" for c in cols))
