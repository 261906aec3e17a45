#!/usr/bin/env python3
r"""Standalone repro: attention-conformance case pinned-b1h8x8-q11k11-d4-f32-large_logits-6d8985 through
torch-sdpa-efficient on cuda.

The call: torch.nn.functional.scaled_dot_product_attention with only SDPBackend.EFFICIENT_ATTENTION enabled,
is_causal=False, attn_mask=None.

The case: B=1, Hq=8, Hkv=8, Lq=11, Lk=11, d=4, dv=4; float32 inputs; scale 1/sqrt(d) (§2); inputs 'large_logits';
inputs from seed 0 (NumPy PCG64).

Expected values: exact attention in float64, computed below (reference_attention; the § numbers cite
oracles/SEMANTICS.md of attention-conformance). Tolerance: per quantity, the largest per-element error bound the
harness computed for this case (its TOLERANCES.md), so a value beyond it fails the harness's check too.

Exit status: 1 while the defect stands (a value outside its tolerance, NaN/Inf where the expected value is finite, a
finite LSE on a row with no visible key, or the call raising), 0 once every compared value is within its tolerance,
2 when it cannot run here (needs CUDA, a missing library, inputs that differ from the harness's, the library
declining the call).

Needs numpy and torch (CUDA) and the library under test; imports nothing from attention-conformance. Written by
    python -m attention_conformance repro \
        '{"family":"pinned","B":1,"Hq":8,"Hkv":8,"Lq":11,"Lk":11,"d":4,"dv":4,"dtype":"float32","scale":null,"causal":false,"alignment":"bottom_right","window":null,"mask":null,"bias":null,"softcap":null,"seqlens_q":null,"seqlens_k":null,"distribution":"large_logits","layout":"contiguous","backward":false,"fp8":null,"seed":0,"sinks":null,"chunk":null,"kv_append":null,"lse_grad":false,"note":"","id":"pinned-b1h8x8-q11k11-d4-f32-large_logits-6d8985"}' \
        --impl torch-sdpa-efficient --standalone --device cuda --out \
        conformance/repros/torch-cuda-efficient-lse-large-logits-drawn.py
(the adapter's claim on this case: checked against torch-sdpa-efficient's declared claims; torch's dispatcher
(torch._fused_sdp_choice) was not asked (no cuda device where this file was written)).
"""

import hashlib
import math
import sys
import traceback

import numpy as np

CASE_ID = "pinned-b1h8x8-q11k11-d4-f32-large_logits-6d8985"
LIBRARY = ("torch.nn.functional.scaled_dot_product_attention with only SDPBackend.EFFICIENT_ATTENTION "
           "enabled, is_causal=False, attn_mask=None")
DEVICE = "cuda"
SEQLENS_Q = None  # query lengths (§7); None: every row is real
SEQLENS_K = None  # key lengths (§7); None: every key is real
# per quantity: the harness's error bound of each compared element (a quantity of more than 4096
# elements: the largest of them)
TOLERANCE = {
    "out": np.array([
        0.00011654666353886679, 0.0003903921046557965, 0.00012342651774131428,
        0.0005157199024273671, 0.002575941492766325, 0.001947478126636703, 0.0007189603583501032,
        0.0041789788115131725, 0.0009248784043186509, 0.00011201332117187378, 0.003017793781701987,
        0.0006747429732215338, 0.00114284089507283, 0.00013841106423330413, 0.0037289854866556864,
        0.0008337570213120933, 0.00014006114762420992, 0.00035668979443657266,
        0.00032426805519677733, 0.0004499764138847794, 0.0023564056593092563, 0.0006912041745259565,
        0.002899784067429723, 0.001685086135240382, 0.0019622260335040178, 0.0005755795146575333,
        0.0024147080814254695, 0.0014032048642399731, 0.001656554871480049, 0.0006421017744718926,
        0.0013402681151981899, 0.0011967470284592865, 0.0014383099142847595, 0.001087399378998272,
        0.0004014401624645901, 0.0023333855283958014, 0.00021095854722611522, 0.0005372422125699794,
        0.0004884089484950467, 0.0006777494842027265, 0.0057640206760280425, 0.004357748244239095,
        0.001608769691186208, 0.009351032275617911, 0.0012471776654461668, 0.0006544562654201017,
        0.000773960675260918, 0.0008708516058392935, 0.001836137279456475, 0.0017130803662765532,
        0.0031746840093284305, 0.007525069864576197, 0.0032297676058897977, 0.004261612852953506,
        0.004082518346154771, 0.002979382960293801, 0.0010855303651563335, 0.0010127787155962558,
        0.0018768835699051855, 0.004448845916541915, 0.004556871748634675, 0.006528519763595273,
        0.004347962870524668, 0.005352397956424528, 0.003404718263874473, 0.004877857377012672,
        0.0032486296328964838, 0.003999104667192593, 0.010766876743963223, 0.001550228923785669,
        4.506922856525681e-05, 0.0010033773789360832, 0.005909052470386583, 0.00846575632693608,
        0.005638153136287157, 0.006940638690649718, 0.005277684423684666, 0.006963797560168642,
        0.006671143597333825, 0.004868536984846651, 0.003502097473294287, 0.0005042365512414245,
        1.4659481596666797e-05, 0.00032636441069160474, 0.0016557426371666248, 0.00688684225476385,
        0.0005922386081778314, 0.002373474704146489, 0.0019938953256359426, 0.0025961316511707365,
        0.0004518275486476054, 6.464803894414172e-05, 0.004147038215533258, 0.0015304044434278179,
        0.0012599620000894594, 0.0009892313316253417, 0.004337169050119743, 0.004605825535688032,
        0.0017953187443869902, 0.003246992214564936, 0.0014477912985470381, 1.4258875836524167e-06,
        0.00011885413767890628, 0.0007515218235212244, 0.0001061396655148784, 0.0014386558940601593,
        0.00048538029621635217, 0.0022676061828596663, 0.00010028489436469708,
        0.0013592981819105857, 0.00045860622884607574, 0.002142522735545443, 0.00014065304072665937,
        0.00030557486546517985, 4.363392990832019e-05, 2.404249063239154e-06, 0.003876243772676362,
        0.0008788858295501675, 0.002895749108669659, 0.003974186093108406, 0.0013206127817825277,
        6.8711370690249085e-06, 0.00011667225363216148, 0.0006844521781088676,
        0.00018504392470726822, 0.002508153117392465, 0.0008462121540684518, 0.0039533452996231705,
        0.00014627957778343598, 0.001982726963929163, 0.0006689414786687293, 0.003125169778882744,
        0.00012038871066455741, 0.0011473629892455768, 0.0008454907905272488, 0.0008706478266166107,
        0.0003352373584046669, 0.0031949751394688506, 0.0023543744060984745, 0.002424427306219544,
        0.00015026132592686417, 0.0002023050468367493, 0.0005346065181187498, 0.0004231806185618961,
        0.0011151431718801799, 0.0010337901216365597, 0.0007487115129313871, 0.0018626581093181087,
        0.002224872635930683, 5.2460118660523345e-05, 0.0012020449681332712, 0.00012368808144784836,
        0.0021436544781312915, 0.001933345211242768, 0.0016652803885782545, 0.0020722953546624305,
        0.001245283955715529, 0.0011544367436520859, 0.0008360885472140403, 0.002080036283239237,
        0.0005212520186799406, 0.00048322511528801085, 0.0003499706561143985, 0.0008706633588184214,
        0.00013952920211708522, 0.001329781185830409, 0.0009799146011980786, 0.0010090713315410074,
        0.00018421039396889936, 0.0017556146843633012, 0.0012937109365185114, 0.0013322044755183894,
        0.00025942489718709075, 0.00034927793730236343, 0.0009229935922834139,
        0.0007306177273813202, 0.0027758733172814857, 0.0007146335119348106, 0.002055168522316865,
        0.0006139181650347538, 0.000620860466297087, 0.002316827864038451, 0.0015762335543920624,
        0.0032649972591654365, 0.0008900731790783169, 0.0005314312272885224, 0.001083306289395644,
        0.00040746825109916205, 0.0023256702487607123, 0.0005987311766452771, 0.0017218524558688182,
        0.0005143502776968816, 0.0009009332248814426, 0.000537915376687947, 0.0010965240294626276,
        0.00041243989160498956, 0.0007933318616646505, 0.00047367040688509174,
        0.0009655626250969766, 0.0003631808640144344, 0.000684622497647273, 0.00040876388897698515,
        0.0008332526751694285, 0.0003134146026828958, 0.0007914302230244266, 0.0015118929474113635,
        0.0006577347263806943, 0.0019790596102104816, 0.0014083506986638933, 0.0008408764108796339,
        0.0017141008238414767, 0.0006447314778242141, 0.0005503089146848939, 0.0003285699971564645,
        0.0006697798814766684, 0.000251926938482888, 0.0017458857364433644, 0.00104240664861331,
        0.0021249140444988355, 0.0007992522686552667, 0.005484636636132931, 0.0008502944231990633,
        0.002689240551490285, 0.0026230124870778534, 0.0008785302365834843, 0.0002700658999599392,
        0.00022281700284742628, 0.0005428876669090293, 0.006956244885830317, 0.0012615740554027515,
        0.0006437534861803853, 0.0010912557833786158, 0.0016192036661411792, 0.0028344839547183066,
        0.0008218361247590572, 0.0031769740367780653, 0.01823381508056886, 0.00330685713545166,
        0.0016874164462488722, 0.002860416285840969, 0.0011038348302008952, 0.004101661995026443,
        0.0007567456931660732, 0.0017200795079248335, 0.00011647679212474469,
        2.2504312747601122e-05, 0.00474881352982785, 0.0007620312903878449, 0.0024708865238135384,
        0.00038306658598238875, 0.0012115311694814734, 0.0011816947294920476, 0.0014654487611951575,
        0.005445357697545033, 0.0010046539647495655, 0.0022835738781560866, 0.007624576509117554,
        0.001182053673755919, 0.0037385011435718744, 0.0036464328849680765, 0.006900582784704246,
        0.001251479260897616, 0.0006386023346271925, 0.0010825238323381114, 0.0013866928595490688,
        0.00035586943957830386, 0.00022495139941361452, 0.0003114969782449121, 0.006506793515160377,
        0.004155404281721547, 0.0017602657296328147, 0.004911995510536094, 0.0014748769629978195,
        0.003790935944209873, 0.0018118917864359792, 0.0006272112582233916, 0.002748778821730829,
        0.0017554402577417986, 0.0007436199023312617, 0.0020750603504383273, 9.06211645001557e-05,
        0.00010031662693063626, 0.0010751015991582982, 0.0026426494287088947, 0.006294134234716266,
        0.004019594641774258, 0.001702735574022073, 0.004751458461314922, 0.0022764620128196615,
        0.0005842124700828633, 0.00036929108848389214, 0.0005113684931739296, 0.001027968728250048,
        0.001972735136196262, 0.0037323520963958344, 0.00013269604150743648, 0.0011705663618301293,
        0.0022463887546100704, 0.004250096033548211, 0.00015110335389389065, 0.00038442162320580437,
        0.0004255488622944582, 0.004560672976012644, 0.011210344962935995, 6.67090300227203e-05,
        7.384587681150722e-05, 0.0007914176833849935, 0.001945341243973648, 0.001105966363492834,
        0.0008726009438586448, 0.0005952770445172975, 0.0007821404870233091, 0.0009268426468075247,
        0.00042287111574637793, 0.003028938169863524, 0.003788968649216439, 0.0008457119612590331,
        0.0028194109799499715, 0.0013660301664564273, 0.00016555912842798644, 0.000421750873446281,
        0.0023356917979679478, 0.0005624363964231382, 0.0027870660996326927, 0.0004237159285259788,
        0.00019332000752496933, 0.0013847111519006577, 0.0017321671320244788, 8.619818772598355e-05,
        0.0016183730446366988, 0.002614694921672361, 0.0016480877317569152, 0.00034304970386216446,
        0.00015651611579196517, 0.0011210925023438967, 0.0014024004803122228, 0.0001516129668422137,
        0.002846537093504033, 0.0045989557892122486, 0.002898801903147196, 0.0001140954332619735,
        0.0021421444995375787, 0.003460916729298741, 0.0021814760700805996, 0.0007191831379360285,
        0.002397592713094734, 0.0011616553940715774, 0.00014078946373128582, 0.0008243327408343022,
        0.004565224028654814, 0.0010993094867117268, 0.005447457210990739
    ]).reshape((1, 8, 11, 4)),
    "lse": np.array([
        0.000453535653651392, 0.0011399689544246791, 0.0013668125553619353, 0.0016846810407543837,
        0.0006771369964770199, 0.0011006495946917947, 0.0009286751867173097, 0.0006303610938621382,
        0.0006395837475231654, 0.0010235914879056544, 0.0025752121272581713, 0.0009297925520060892,
        0.0016706086378039055, 0.0013206880055554938, 0.001000418129113517, 0.002096451084040078,
        0.0015266627902660716, 0.0028491584763734802, 0.0027476722009982775, 0.0021548360285164733,
        0.0009179538923010469, 0.0015939931673000164, 0.0021060817803437307, 0.0013487300081656691,
        0.0020438340289593397, 0.0008976112303579512, 0.001440179455944519, 0.0013715597487204412,
        0.00025492942875861573, 0.0020663835818854307, 0.0008166393011837092, 0.0025394971299889067,
        0.0020074728084070277, 0.0013673396408848747, 0.003819046457890272, 0.0004370042826135111,
        0.0015837812191949441, 0.0005617125432794304, 0.0013434323882305804, 0.0017750071489666497,
        0.0007374181336524941, 0.001581335758600387, 0.0020155158781856577, 0.000761285219085238,
        0.0022896877046493297, 0.0011645307652123607, 0.0010471123227652672, 0.0018834443526974745,
        0.0010264961387221993, 0.000941307262529755, 0.0008044098444236346, 0.0006326833764338017,
        0.001651896978128941, 0.0006433394573621636, 0.002072854796479936, 0.001947672359004475,
        0.0005255792559174964, 0.001332590034174414, 0.001486010350108767, 0.003499869930223721,
        0.0009133625797771627, 0.0023207856690200175, 0.0008709192926293174, 0.0012257363660319253,
        0.002697030658039306, 0.0013246396746572704, 0.0006586980762727054, 0.003155636821062555,
        0.0015290724631304188, 0.0012998116538882848, 0.0006591176212580618, 0.0029471818305452082,
        0.0010814485982310728, 0.0007802597424208868, 0.0008996321768714689, 0.002769856101565789,
        0.0004875527614295309, 0.0005706377694988214, 0.0013718552112725803, 0.0009695394381898073,
        0.0013630093680188473, 0.0006208842518708253, 0.0013826743826742581, 0.0005020618485882694,
        0.0024058430450777137, 0.0018245067506175855, 0.0008300203796372883, 0.002667515675180074
    ]).reshape((1, 8, 11)),
}
LSE_PLUS_INF_OK = False  # +inf passes as the LSE of a row with no visible key
# SHA-256 of the harness's inputs for this case (input_digest): make_inputs() must give exactly these
INPUTS_SHA256 = "78353dd07fe99b8784325b1d96acfa694dd9e480ee10b8b63c44d68fd512deb5"


class LibraryDeclined(Exception):
    """The library refused the call itself before computing anything (torch SDPA's "No available kernel")."""


def round_to(x, dtype):
    """``x`` rounded once to ``dtype`` (round to nearest, ties to even) and widened back to float64.

    float32 / float16: NumPy's direct conversion. bfloat16 and FP8: on the format's grid, within the binade of |x|
    (clamped at the smallest normal exponent) x / quantum is rounded half to even; FP8 saturates at +-max
    (SEMANTICS.md §1, §10). NaN stays NaN.
    """
    x = np.asarray(x, dtype=np.float64)
    if dtype == "float64":
        return x.copy()
    if dtype in ("float32", "float16"):
        return x.astype(dtype).astype(np.float64)
    mbits, emin, fmax = {"bfloat16": (7, -126, None), "float8_e4m3fn": (3, -6, 448.0),
                         "float8_e5m2": (2, -14, 57344.0)}[dtype]
    if fmax is not None:
        x = np.clip(x, -fmax, fmax)
    _, ex = np.frexp(np.abs(x))
    quantum = np.ldexp(1.0, (np.maximum(ex.astype(np.int64) - 1, emin) - mbits).astype(np.int32))
    out = np.round(x / quantum) * quantum
    return out if fmax is None else np.clip(out, -fmax, fmax)


def input_digest(arrays):
    """SHA-256 over the named arrays in name order: the name, the shape, and the values as float64 (integer arrays as
    int64, boolean ones as bool) bytes."""
    h = hashlib.sha256()
    for name in sorted(arrays):
        a = np.asarray(arrays[name])
        kind = bool if a.dtype == bool else np.int64 if a.dtype.kind in "iu" else np.float64
        a = np.ascontiguousarray(a, dtype=kind)
        h.update(f"{name}{list(a.shape)}{a.dtype.str}".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def visible(sq, sk, rows, *, causal, alignment, window, chunk):
    """bool [len(rows), sk]: which of a sequence's sk real keys its query rows ``rows`` (each < sq) see.

    The aligned diagonal is c(i) = i + sk - sq ("bottom_right") or i ("top_left") (SEMANTICS.md §4); causal keeps
    j <= c(i); a window (left, right) keeps c(i) - left <= j <= c(i) + right, None = unbounded (§5); a chunk C keeps
    floor(c(i) / C) == floor(j / C) (§19). The boolean mask and -inf bias entries (§6) are the caller's.
    """
    c = np.asarray(rows, dtype=np.int64)[:, None] + (sk - sq if alignment == "bottom_right" else 0)
    j = np.arange(sk, dtype=np.int64)[None, :]
    left, right = window if window is not None else (None, None)
    if causal:
        right = 0 if right is None else min(right, 0)
    vis = np.ones((len(c), sk), dtype=bool)
    if right is not None:
        vis &= j <= c + right
    if left is not None:
        vis &= j >= c - left
    if chunk is not None:
        vis &= (c // chunk) == (j // chunk)
    return vis


def _plane(a, b, h, Lq, Lk):
    """Batch b, head h of a mask or bias broadcastable to [B, H, Lq, Lk], as [Lq, Lk]."""
    return np.broadcast_to(a[b if a.shape[0] > 1 else 0, h if a.shape[1] > 1 else 0], (Lq, Lk))


def reference_attention(q, k, v, *, scale, causal, alignment, window, chunk, softcap, mask, bias, seqlens_q,
                        seqlens_k, sinks, dout=None, dlse=None):
    """Exact attention in float64, as attention-conformance's contract defines it (oracles/SEMANTICS.md).

    Scores s = scale * q.k (§2), then softcap c * tanh(s / c) (§3), plus bias, then -inf where a key is not visible
    (`visible`, the boolean mask, -inf bias; §4-§7, §19); LSE = log sum exp over the visible keys (with the sink
    exp(sinks[h]) in the sum, §18), P = exp(s - LSE), out = P v; a row with no visible key has out = 0 and LSE = -inf
    (the sink's logit with a sink) (§8). GQA: query head h reads kv head h // (Hq / Hkv) (§9). Padded rows
    (i >= seqlens_q[b]) are 0 / -inf and padded keys never read (§7). With ``dout``, the gradients of
    sum(out * dout) + sum(lse * dlse) (§13, §18): dq, dk, dv (summed over each kv head's query heads) and, with
    sinks, dsinks. Returns a dict of float64 arrays: out, lse (and dq, dk, dv, dsinks).
    """
    B, Hq, Lq, d = q.shape
    Hkv, Lk, dv_dim = k.shape[1], k.shape[2], v.shape[3]
    group = Hq // Hkv
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    out = np.zeros((B, Hq, Lq, dv_dim))
    lse = np.full((B, Hq, Lq), -np.inf)
    grads = None
    if dout is not None:
        grads = {"dq": np.zeros(q.shape), "dk": np.zeros(k.shape), "dv": np.zeros(v.shape)}
        if sinks is not None:
            grads["dsinks"] = np.zeros(Hq)
    for b in range(B):
        sq = Lq if seqlens_q is None else int(seqlens_q[b])
        sk = Lk if seqlens_k is None else int(seqlens_k[b])
        step = max(1, (1 << 22) // max(sk, 1))  # rows per block: about 4M scores at a time
        for h in range(Hq):
            hk = h // group
            kb, vb = k[b, hk, :sk], v[b, hk, :sk]
            sink = -np.inf if sinks is None else float(sinks[h])
            for r0 in range(0, sq, step):
                r1 = min(sq, r0 + step)
                s = (scale * q[b, h, r0:r1]) @ kb.T
                t = None
                if softcap is not None:
                    t = np.tanh(s / softcap)
                    s = softcap * t
                if bias is not None:
                    s = s + _plane(bias, b, h, Lq, Lk)[r0:r1, :sk]
                vis = visible(sq, sk, np.arange(r0, r1), causal=causal, alignment=alignment, window=window,
                              chunk=chunk)
                if mask is not None:
                    vis &= _plane(mask, b, h, Lq, Lk)[r0:r1, :sk]
                vis &= s > -np.inf
                s = np.where(vis, s, -np.inf)
                m = np.maximum(s.max(axis=1, initial=-np.inf), sink)
                mf = np.where(np.isfinite(m), m, 0.0)
                e = np.where(vis, np.exp(s - mf[:, None]), 0.0)
                total = e.sum(axis=1) + np.exp(sink - mf)
                has = total > 0
                L = np.where(has, mf + np.log(np.where(has, total, 1.0)), -np.inf)
                P = e / np.where(has, total, 1.0)[:, None]
                O = P @ vb
                out[b, h, r0:r1], lse[b, h, r0:r1] = O, L
                if grads is None:
                    continue
                dO = dout[b, h, r0:r1]
                D = (dO * O).sum(axis=1)
                if dlse is not None:
                    D = D - np.where(has, dlse[b, h, r0:r1], 0.0)
                dS = P * (dO @ vb.T - D[:, None])
                if t is not None:
                    dS = dS * (1.0 - t * t)
                grads["dq"][b, h, r0:r1] = scale * (dS @ kb)
                grads["dk"][b, hk, :sk] += scale * (dS.T @ q[b, h, r0:r1])
                grads["dv"][b, hk, :sk] += P.T @ dO
                if sinks is not None:
                    grads["dsinks"][h] -= float(np.sum(np.where(has, np.exp(sink - L), 0.0) * D))
    result = {"out": out, "lse": lse}
    result.update(grads or {})
    return result


def _where(name, index):
    return f"{name}[{', '.join(str(int(i)) for i in index)}]"


def check_values(name, expected, observed, tolerance, compared):
    """(defect, report lines) for one quantity: NaN/Inf where the expected value is finite is a defect, and so is an
    |observed - expected| above ``tolerance`` on a compared element (``compared``: bool, broadcastable)."""
    observed = np.asarray(observed, dtype=np.float64)
    if observed.shape != expected.shape:
        return True, [f"{name}: shape {list(observed.shape)}, expected {list(expected.shape)}"]
    sel = np.broadcast_to(compared, expected.shape) & np.isfinite(expected)
    bad = sel & ~np.isfinite(observed)
    err = np.where(sel & np.isfinite(observed), np.abs(observed - expected), 0.0)
    lines = []
    if bad.any():
        i = np.unravel_index(int(np.argmax(bad)), bad.shape)
        lines.append(f"{name}: {int(bad.sum())} of {int(sel.sum())} compared values are NaN/Inf where the expected "
                     f"value is finite; first at {_where(name, i)}: expected {float(expected[i])!r}, observed "
                     f"{float(observed[i])!r}")
    if err.size == 0:
        return bool(bad.any()), lines or [f"{name}: nothing to compare"]
    tol = np.broadcast_to(np.asarray(tolerance, dtype=np.float64), err.shape)  # one bound, or one per element
    usage = np.where(tol > 0, err / np.where(tol > 0, tol, 1.0), np.where(err > 0, np.inf, 0.0))
    i = np.unravel_index(int(np.argmax(usage)), usage.shape)
    over = bool((err > tol).any())
    lines.append(f"{name}: worst |observed - expected| against its tolerance at {_where(name, i)}: {err[i]:.6g}, "
                 f"expected {float(expected[i])!r}, observed {float(observed[i])!r}, tolerance {tol[i]:.6g} "
                 f"({'EXCEEDED' if over else 'within'})")
    return bool(bad.any()) or over, lines


def check_lse(expected, observed, tolerance, compared, plus_inf_ok=False):
    """`check_values` on the rows with a finite expected LSE; a compared row whose expected LSE is -inf (no visible
    key, SEMANTICS.md §8) must be -inf too, or +inf where ``plus_inf_ok`` (FA2's convention, which the harness
    accepts from an adapter that reports it)."""
    observed = np.asarray(observed, dtype=np.float64)
    if observed.shape != expected.shape:
        return True, [f"lse: shape {list(observed.shape)}, expected {list(expected.shape)}"]
    rows = np.broadcast_to(compared, expected.shape)
    allowed = np.isinf(observed) if plus_inf_ok else np.isneginf(observed)
    empty = rows & np.isneginf(expected) & ~allowed
    lines = []
    if empty.any():
        i = np.unravel_index(int(np.argmax(empty)), empty.shape)
        lines.append(f"lse: {int(empty.sum())} row(s) with no visible key have a finite LSE, expected -inf "
                     f"(SEMANTICS.md §8); first at {_where('lse', i)}: observed {float(observed[i])!r}")
    defect, more = check_values("lse", np.where(np.isfinite(expected), expected, 0.0),
                                np.where(np.isfinite(expected), observed, 0.0), tolerance,
                                rows & np.isfinite(expected))
    return defect or bool(empty.any()), lines + more


def compared(name, shape, seqlens_q, seqlens_k):
    """bool, broadcastable to ``shape``: the compared elements of quantity ``name`` (SEMANTICS.md §7: padding is not
    compared): query rows i < seqlens_q[b] of out, lse and dq, key rows j < seqlens_k[b] of dk and dv, all of dsinks."""
    if name == "dsinks":
        return np.ones(shape, dtype=bool)
    lens = seqlens_k if name in ("dk", "dv") else seqlens_q
    rows = np.ones((shape[0], 1, shape[2]), dtype=bool)
    if lens is not None:
        rows = np.arange(shape[2])[None, None, :] < np.asarray(lens)[:, None, None]
    return rows if len(shape) == 3 else rows[..., None]


def as_tensor(array, dtype, device, layout="contiguous", requires_grad=False):
    """(leaf, view): float64 ``array`` [B, H, L, D] as a tensor of torch ``dtype`` on ``device`` (exact: the values are
    representable). Layouts: contiguous; bshd, a contiguous [B, L, H, D] tensor transposed to [B, H, L, D];
    kv_broadcast, batch entry 0 expanded over the batch with stride 0. Gradients are taken with respect to the view."""
    import torch

    if layout == "bshd":
        leaf = torch.from_numpy(np.ascontiguousarray(array.transpose(0, 2, 1, 3))).to(dtype).to(device)
        leaf.requires_grad_(requires_grad)
        return leaf, leaf.transpose(1, 2)
    if layout == "kv_broadcast":
        leaf = torch.from_numpy(np.ascontiguousarray(array[:1])).to(dtype).to(device).requires_grad_(requires_grad)
        return leaf, leaf.expand(array.shape[0], *leaf.shape[1:])
    leaf = torch.from_numpy(np.ascontiguousarray(array)).to(dtype).to(device).requires_grad_(requires_grad)
    return leaf, leaf


def make_inputs():
    """The inputs of the case, as attention-conformance makes them (conformance/cases/inputs.py) from seed 0:
    float64 arrays whose values are exact in float32. The digest check in main() proves they are the harness's."""
    rng = np.random.default_rng(0)
    c = 40.0  # |scale| * c^2 * sqrt(d) = 1600: scores reach ~1e4
    q = c * rng.standard_normal((1, 8, 11, 4))
    k = c * rng.standard_normal((1, 8, 11, 4))
    v = rng.standard_normal((1, 8, 11, 4))
    q, k, v = (round_to(x, "float32") for x in (q, k, v))  # exact in float32 (SEMANTICS.md §1)
    return {"q": q, "k": k, "v": v}


def expected_values(inp):
    """The expected values in float64 (SEMANTICS.md): out and lse."""
    return reference_attention(
        inp["q"], inp["k"], inp["v"], scale=None, causal=False, alignment="bottom_right",
        window=None, chunk=None, softcap=None, mask=inp.get("mask"), bias=inp.get("bias"),
        seqlens_q=None, seqlens_k=None, sinks=inp.get("sinks"))


def cannot_run_here():
    """Why this file cannot make its call here (exit status 2), or None."""
    try:
        import torch
    except ImportError as exc:
        return f"needs torch ({exc})"
    if not torch.cuda.is_available():
        return ("needs CUDA: SDPBackend.EFFICIENT_ATTENTION runs on CUDA; "
                f"torch {torch.__version__} sees no CUDA device")
    return None


def versions():
    """The versions this run used, for the report."""
    import torch

    parts = [f"torch {torch.__version__}"]
    parts.append(f"{torch.cuda.get_device_name()} (sm{''.join(map(str, torch.cuda.get_device_capability()))})")
    return ", ".join(parts)


def run_library(inp):
    """The call under test: torch.nn.functional.scaled_dot_product_attention with only SDPBackend.EFFICIENT_ATTENTION
    enabled, is_causal=False, attn_mask=None, on cuda. Returns float64 arrays."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def sdpa(requires_grad):
        _, q = as_tensor(inp["q"], torch.float32, DEVICE, "contiguous", requires_grad)
        _, k = as_tensor(inp["k"], torch.float32, DEVICE, "contiguous", requires_grad)
        _, v = as_tensor(inp["v"], torch.float32, DEVICE, "contiguous", requires_grad)
        attn_mask = None
        try:
            with sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION]):  # only this backend: no silent fallback
                out = torch.nn.functional.scaled_dot_product_attention(
                    q, k, v, attn_mask=attn_mask, dropout_p=0.0, is_causal=False,
                    scale=None)
        except RuntimeError as exc:
            if "No available kernel" in str(exc):  # the backend refused these inputs: it computed nothing
                raise LibraryDeclined(str(exc)) from None
            raise
        return q, k, v, out, attn_mask

    result = {"out": sdpa(False)[3]}
    q, k, v, _, fmask = sdpa(False)
    if fmask is not None and fmask.dtype == torch.bool:
        fmask = torch.zeros(fmask.shape, dtype=q.dtype, device=DEVICE).masked_fill(~fmask, -math.inf)
    op = torch.ops.aten._scaled_dot_product_efficient_attention(
        q, k, v, fmask, True, 0.0, False, scale=None)
    if torch.equal(op[0], result["out"]):  # else the op is another computation: no LSE reported
        result["lse"] = op[1][..., :11].float()
    return {name: t.detach().to("cpu", torch.float64).numpy() for name, t in result.items()}


def main():
    """Make the inputs, check they are the harness's, compute the expected values, call the library, compare."""
    print(f"case {CASE_ID}: {LIBRARY}, on {DEVICE}")
    reason = cannot_run_here()
    if reason:
        print(f"cannot run here: {reason}", file=sys.stderr)
        return 2
    print(f"versions: {versions()}")
    inp = make_inputs()
    digest = input_digest(inp)
    if digest != INPUTS_SHA256:
        print(f"cannot run here: the inputs made here (SHA-256 {digest}) are not the harness's ({INPUTS_SHA256}); "
              f"numpy {np.__version__}", file=sys.stderr)
        return 2
    expected = expected_values(inp)
    try:
        observed = run_library(inp)
    except LibraryDeclined as exc:
        print(f"cannot run here: the library declined the call: {' '.join(str(exc).split())[:600]}", file=sys.stderr)
        return 2
    except Exception as exc:
        traceback.print_exc()
        print(f"DEFECT: the call raised {type(exc).__name__} on a case this spelling accepts; exit status 1")
        return 1
    defect = False
    for name, got in observed.items():
        rows = compared(name, expected[name].shape, SEQLENS_Q, SEQLENS_K)
        if name == "lse":
            bad, lines = check_lse(expected[name], got, TOLERANCE[name], rows, plus_inf_ok=LSE_PLUS_INF_OK)
        else:
            bad, lines = check_values(name, expected[name], got, TOLERANCE[name], rows)
        defect = defect or bad
        print("\n".join(lines))
    if defect:
        print("DEFECT: see the EXCEEDED / NaN lines above; exit status 1")
        return 1
    print("no defect: every compared value is within its tolerance; exit status 0")
    return 0


if __name__ == "__main__":
    sys.exit(main())
