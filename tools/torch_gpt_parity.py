"""30-step parity of mpsc's training against PyTorch (run by test/torch_gpt_parity.test.ts).
Reads a JSON job on stdin: {"init": file, "batches": [[tokens, targets], ...] (B x T ids each),
"lrs": [...], "model": {V, T, C, L, H, attn, tied}, "optimizer": {beta1, beta2, eps, weight_decay}};
starts from mpsc's initial weights, runs AdamW with the per-step learning rates mpsc used on the
same batches, and prints {"losses": [...]} (the loss of each step, before its update)."""
import json, os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch, torch.nn.functional as F
from torch_gpt_model import GPT, load_mpsc

job = json.load(sys.stdin)
torch.set_num_threads(1)
m = job['model']
model = GPT(m['V'], m['T'], m['C'], m['L'], m['H'], attn=m['attn'], tied=m['tied'])
load_mpsc(model, job['init'], tied=m['tied'])
o = job['optimizer']
opt = torch.optim.AdamW(model.parameters(), lr=job['lrs'][0], betas=(o['beta1'], o['beta2']), eps=o['eps'], weight_decay=o['weight_decay'])
losses = []
for (x, y), lr in zip(job['batches'], job['lrs']):
    for g in opt.param_groups: g['lr'] = lr
    opt.zero_grad()
    logits = model(torch.tensor(x, dtype=torch.long))
    loss = F.cross_entropy(logits.reshape(-1, m['V']), torch.tensor(y, dtype=torch.long).reshape(-1))
    loss.backward(); opt.step()
    losses.append(loss.item())
print(json.dumps({'losses': losses}))
