"""The PyTorch twin of specs/char_gpt.model and of the parity-test specs (imported by
tools/torch_gpt_interop.py and tools/torch_gpt_parity.py).

GPT is the model of the project's shared torch_gpt_ref.py (GPT-2 style, pre-layernorm, learned
positions, nn.MultiheadAttention's parameter names, exact-erf gelu, untied head), copied here
because the shared folder is not part of the repository. Two variants match the other specs of
test/torch_gpt_parity.test.ts:
  attn="manual": nanoGPT's hand-written attention with a c_attn / c_proj pair of linears
                 (blocks.i.attn.c_attn.weight [3C, C], blocks.i.attn.c_proj.weight [C, C]);
  tied=True:     head.weight is tok.weight (one parameter; a checkpoint stores it once, under
                 tok.weight: load_state_dict gets head.weight filled from it, see load_mpsc).
Also a plain safetensors reader (json + struct) so no mpsc code is involved."""
import json, math, struct
import torch, torch.nn as nn, torch.nn.functional as F


def read_safetensors(path):
    raw = open(path, 'rb').read()
    (n,) = struct.unpack('<Q', raw[:8])
    header = json.loads(raw[8:8 + n])
    meta = header.pop('__metadata__', {})
    out = {}
    for name, t in header.items():
        b, e = t['data_offsets']
        dtype = {'F32': torch.float32, 'I64': torch.int64, 'I32': torch.int32}[t['dtype']]
        out[name] = torch.frombuffer(bytearray(raw[8 + n + b:8 + n + e]), dtype=dtype).reshape(t['shape']).clone()
    return out, meta


class Attn(nn.Module):
    """Causal multi-head self-attention with nn.MultiheadAttention's parameter names."""
    def __init__(s, C, H):
        super().__init__(); s.H = H
        s.in_proj_weight = nn.Parameter(torch.empty(3 * C, C)); s.in_proj_bias = nn.Parameter(torch.empty(3 * C))
        s.out_proj = nn.Linear(C, C)
        lin = nn.Linear(C, 3 * C)
        with torch.no_grad(): s.in_proj_weight.copy_(lin.weight); s.in_proj_bias.copy_(lin.bias)

    def forward(s, x):
        B, T, C = x.shape
        q, k, v = F.linear(x, s.in_proj_weight, s.in_proj_bias).split(C, dim=2)
        q, k, v = (t.view(B, T, s.H, C // s.H).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return s.out_proj(y.transpose(1, 2).reshape(B, T, C))


class ManualAttn(nn.Module):
    """nanoGPT's manual path: q k^T / sqrt(D), causal -inf, softmax, @ v."""
    def __init__(s, C, H):
        super().__init__(); s.H = H
        s.c_attn = nn.Linear(C, 3 * C); s.c_proj = nn.Linear(C, C)

    def forward(s, x):
        B, T, C = x.shape
        q, k, v = s.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, s.H, C // s.H).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // s.H))
        att = att.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), float('-inf')).softmax(-1)
        return s.c_proj((att @ v).transpose(1, 2).reshape(B, T, C))


class Block(nn.Module):
    def __init__(s, C, H, attn):
        super().__init__()
        s.ln1 = nn.LayerNorm(C); s.attn = (ManualAttn if attn == 'manual' else Attn)(C, H); s.ln2 = nn.LayerNorm(C)
        s.fc = nn.Linear(C, 4 * C); s.proj = nn.Linear(4 * C, C)

    def forward(s, x):
        x = x + s.attn(s.ln1(x))
        return x + s.proj(F.gelu(s.fc(s.ln2(x))))


class GPT(nn.Module):
    def __init__(s, V, T, C, L, H, attn='fused', tied=False):
        super().__init__()
        s.tok = nn.Embedding(V, C); s.pos = nn.Embedding(T, C)
        s.blocks = nn.ModuleList([Block(C, H, attn) for _ in range(L)])
        s.ln_f = nn.LayerNorm(C); s.head = nn.Linear(C, V, bias=False)
        if tied: s.head.weight = s.tok.weight

    def forward(s, idx):
        T = idx.shape[1]
        x = s.tok(idx) + s.pos(torch.arange(T, device=idx.device))
        for b in s.blocks: x = b(x)
        return s.head(s.ln_f(x))


OPTIMIZER_STATE = ('.exp_avg', '.exp_avg_sq', '.momentum_buffer', '.grad')


def load_mpsc(model, path, tied=False):
    """Load an mpsc checkpoint (or --save-init file) by name with strict=True; returns the metadata."""
    tensors, meta = read_safetensors(path)
    state = {k: v for k, v in tensors.items() if not k.endswith(OPTIMIZER_STATE)}
    if tied:
        assert 'head.weight' not in state, 'a tied checkpoint stores the shared weight once, as tok.weight'
        state['head.weight'] = state['tok.weight']
    model.load_state_dict(state, strict=True)  # raises on any missing, unexpected or mis-shaped tensor
    return meta
