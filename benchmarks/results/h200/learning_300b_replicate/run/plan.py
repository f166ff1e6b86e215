"""Call 2: how many RL epochs both arms can finish, with every evaluation, in LIMIT seconds; rewrite args.json to that."""
import glob, json, math, re, sys
from pathlib import Path

W = Path(".learning_h100b")
limit = float(sys.argv[1])
args = json.loads((W / "args.json").read_text())
e0 = args["epochs"]

def arm(name):
    outs = sorted(glob.glob(str(W / name / "epoch_*" / "epoch_outputs.json")))
    tot = [json.loads(Path(p).read_text())["timing"]["total_s"] for p in outs]
    recent = tot[-3:] or [60.0]
    return len(outs), 1.15 * sum(recent) / len(recent) + 1.0

def stage_s(name, default):
    for f in sorted(glob.glob(str(W / "logs" / "call*_learnmain_learning_log.txt"))):
        m = re.findall(rf"\] {name}: (\d+) s$", Path(f).read_text(), re.M)
        if m:
            return float(m[-1])
    return default

done_m, te_m = arm("rl")
done_f, te_f = arm("flipped")
ev = stage_s("eval_before", 20.0) + stage_s("eval_before_sampled", 60.0)
overhead = 45.0
post_m = 1.3 * ev * 2 + 30.0   # eval_rl(+sampled), sft_control, eval_sft(+sampled)
post_f = 2.0 * ev              # eval_flipped(+sampled): a collapsed policy writes longer answers
n_m = done_m + math.floor((limit - overhead - post_m) / te_m)
n_f = done_f + math.floor((limit - overhead - post_f) / te_f)
n = max(min(e0, n_m, n_f), done_m, done_f, 1)
print(f"plan: rl done {done_m} (epoch ~{te_m:.1f} s), flipped done {done_f} (~{te_f:.1f} s), eval before {ev:.0f} s; "
      f"fits rl {n_m}, flipped {n_f}; epochs {e0} -> {n}", file=sys.stderr)
if n != e0:
    (W / f"args_call1_epochs{e0}.json").write_text(json.dumps(args, indent=1))
    args["epochs"] = n
    (W / "args.json").write_text(json.dumps(args, indent=1))
print(n)
