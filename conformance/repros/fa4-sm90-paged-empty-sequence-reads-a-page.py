#!/usr/bin/env python3
r"""Standalone repro: attention-conformance case paged-b8h16x2-q4k8192-d64-f16-causal_br-paged128-5d5070 through
flash-attn-4 on cuda.

The call: flash-attn-4 (flash_attn.cute) flash_attn_varlen_func over page caches with page_table and seqused_k,
forward only.

The case: B=8, Hq=16, Hkv=2, Lq=4, Lk=8192, d=64, dv=64; float16 inputs; scale 1/sqrt(d) (§2); causal, bottom-right
alignment (§4); sequence lengths q None, k (8192, 8000, 4097, 4096, 1000, 257, 64, 0) in padded tensors (§7); layout
paged128; inputs from seed 1944868457 (NumPy PCG64).

Expected values: exact attention in float64, computed below (reference_attention; the § numbers cite
oracles/SEMANTICS.md of attention-conformance). Tolerance: per quantity, the largest per-element error bound the
harness computed for this case (its TOLERANCES.md), so a value beyond it fails the harness's check too.

Exit status: 1 while the defect stands (a value outside its tolerance, NaN/Inf where the expected value is finite, a
finite LSE on a row with no visible key, or the call raising), 0 once every compared value is within its tolerance,
2 when it cannot run here (needs CUDA, a missing library, inputs that differ from the harness's, the library
declining the call).

Needs numpy and torch (CUDA) and the library under test; imports nothing from attention-conformance. Written by
    python -m attention_conformance repro paged-b8h16x2-q4k8192-d64-f16-causal_br-paged128-5d5070 --impl \
        flash-attn-4 --device cuda --standalone --out \
        conformance/repros/fa4-sm90-paged-empty-sequence-reads-a-page.py
(the adapter's claim on this case: checked against flash-attn-4's declared claims; the library was not asked (no
cuda device where this file was written)).
"""

import hashlib
import math
import sys
import traceback

import numpy as np

CASE_ID = "paged-b8h16x2-q4k8192-d64-f16-causal_br-paged128-5d5070"
LIBRARY = ("flash-attn-4 (flash_attn.cute) flash_attn_varlen_func over page caches with page_table and "
           "seqused_k, forward only")
DEVICE = "cuda"
SEQLENS_Q = None  # query lengths (§7); None: every row is real
SEQLENS_K = [8192, 8000, 4097, 4096, 1000, 257, 64, 0]  # key lengths (§7); None: every key is real
# per quantity: the harness's error bound of each compared element (a quantity of more than 4096
# elements: the largest of them)
TOLERANCE = {
    "out": 0.0015247069946700985,
    "lse": np.array([
        0.0001493242370565411, 0.00014872441168759263, 0.0001428641251611291, 0.0001469873986297715,
        0.00014623742035203531, 0.00013677182739756354, 0.00014524075959007052,
        0.00014706206873291045, 0.00014402708645792724, 0.00014442371182018805,
        0.00014104377469683856, 0.0001375187194201462, 0.0001491682835345528,
        0.00014253639574024918, 0.0001617868543867615, 0.00014200641831900885,
        0.0001530077410218564, 0.0001510240002638738, 0.0001437346577335295, 0.00014366713108906592,
        0.00014292844859871114, 0.00014245722256550218, 0.0001579090806383142,
        0.00013913879093843185, 0.00014274517405587974, 0.00014797407011093988,
        0.00013868975247304682, 0.0001437732204459399, 0.00014903631286522858,
        0.0001392930815441925, 0.00014032155865754058, 0.00014109124411225817,
        0.00014391540285388306, 0.00014451664839612403, 0.00013706650701130908,
        0.0001500511532842469, 0.00014297539449956056, 0.00015381864151505848,
        0.0001467297455261044, 0.0001448738435841734, 0.00014160898905525614,
        0.00014881122854873663, 0.00014040936879255965, 0.000147168695556302, 0.0001471688270561153,
        0.0001504740547540748, 0.00014858823478804215, 0.00015289668729261108,
        0.00014277619553561009, 0.00014816321277165282, 0.0001432801416272295,
        0.0001469737858304745, 0.00014407761287145074, 0.0001462639823378306,
        0.00014617455397410254, 0.00014168945899201098, 0.00014096858167358378,
        0.00014594983569107708, 0.00013846229643175095, 0.00014681621441684986,
        0.00013671855500459328, 0.00015041909068306907, 0.00016754374829895807,
        0.0001474391735132316, 0.00014158412148828177, 0.00014374475123540365,
        0.0001409411761088772, 0.0001440747879019704, 0.00015219302930422876,
        0.00014581061395771335, 0.0001493786116774915, 0.00015566929458737597,
        0.00014393315154884265, 0.0001495458307261302, 0.00014163322061107542,
        0.00014493940917138944, 0.00014363940552872284, 0.00015044612293395288,
        0.000156812359272434, 0.0001372791253839786, 0.0001716419041917492, 0.00014435947799000168,
        0.0001488557520908373, 0.00015486209174792607, 0.0001455498136153991,
        0.00014053668112720571, 0.0001499164937167482, 0.00014199034650114233,
        0.0001597557086321599, 0.0001562890165798348, 0.00014333797781867968, 0.0001415316223926945,
        0.00014642765813991266, 0.00015026354522608242, 0.00013856985584509792,
        0.0001468541910900402, 0.00015529291548232216, 0.00014595009977606024,
        0.0001409602427985205, 0.00015169653310000594, 0.00014455936831105217,
        0.0001445927450452312, 0.00013894304491470248, 0.0001472811566204138, 0.0001554024208335506,
        0.00014213876369647383, 0.00014592748593649277, 0.0001399400475883475,
        0.00015295640180760356, 0.00013868690658961944, 0.0001387637332734504,
        0.0001519682509230162, 0.00014606878345530796, 0.00013881632572425962,
        0.00014464391978421154, 0.00014025556199054502, 0.00014059235214144815,
        0.00014258444041127832, 0.00014237569811457735, 0.00014919231327858843,
        0.00014771453151527178, 0.00014631926837286338, 0.0001539878775298699,
        0.00014954094008754907, 0.00014314945337676822, 0.00014159911618387425,
        0.00014593587876487963, 0.00014812183193364155, 0.00016955146412719164,
        0.00015832800717557573, 0.00014624067455483073, 0.0001574350769502946,
        0.00015748404263948103, 0.00015203127841629198, 0.00016185127653140196,
        0.00016009839781778952, 0.00015061397222480117, 0.0001590447874301466,
        0.00015322198114023686, 0.00015577707564680388, 0.00015287728547612266,
        0.00017031395528201816, 0.00015678391442516397, 0.00014575672171204175,
        0.00015936440325743743, 0.00015865026937190147, 0.0001673778325389911,
        0.00015283095850301105, 0.00015036177539056613, 0.00015916985688284703,
        0.000168376653379614, 0.00016336257578619678, 0.00016152381573993795,
        0.00015245643743734552, 0.00014818916022929773, 0.00015587585035888165,
        0.0001692621079679597, 0.00016355342654267367, 0.00015745460038179535,
        0.00015690525841656927, 0.00015203912785792648, 0.0001481052961892623,
        0.00015076197185962236, 0.0001618806624263121, 0.00016346629638885104,
        0.00015272156038893375, 0.0001519272973521735, 0.000161614576910275, 0.00014805569970994097,
        0.00017182083079642752, 0.00015102123166996, 0.00015744181621206189, 0.00015394915188050146,
        0.00015375116745866595, 0.00016083806513113216, 0.00015384861966041464,
        0.00015304198863160255, 0.00015476886335153973, 0.00015687742511607817,
        0.00016192757608177118, 0.00015601513722446672, 0.00015473443907191838,
        0.0001566308698796484, 0.00014984951361184923, 0.00015680034279254437,
        0.00015491120649000856, 0.00015677275288961855, 0.0001401292754806626,
        0.00015776816783512408, 0.00014590093142755018, 0.0001485064441459877,
        0.00015504126874051508, 0.00016674464980338517, 0.00015721914020461468,
        0.00014762558858760788, 0.00015551210847735412, 0.00015381424849033757,
        0.0001479491323476587, 0.00014927780322423182, 0.0001532876349990439, 0.0001573687436991665,
        0.0001500960633299222, 0.00015118892240992634, 0.00016692882795237197,
        0.0001540203183069926, 0.000156923049154163, 0.00015158630298334414, 0.00015610919025010504,
        0.00016039491571380118, 0.00015216963085395681, 0.00015824839576028757,
        0.00015173950622857622, 0.0001626498121837352, 0.0001543470284011589,
        0.00015258945375756967, 0.0001477652614504483, 0.00014729986188640913,
        0.00015588307726042164, 0.0001621701238415838, 0.0001520490908588896,
        0.00015041694489997682, 0.00016218066319446698, 0.00015589111982808275,
        0.00015366761671273035, 0.0001478555568890458, 0.00014706621317109184,
        0.0001516429644284361, 0.00015725465153039296, 0.00015729805750133903,
        0.00015255680335223652, 0.00016626961447970099, 0.0001784866339473066,
        0.00015751638378491052, 0.0001533168307953559, 0.00014853559226570294,
        0.00014762643452032728, 0.00016305651727453017, 0.00014694380073980884,
        0.0001560368147590395, 0.00014998311644972694, 0.00016818392794718372,
        0.00014955581060414075, 0.00015244035286779303, 0.0001550392110934345,
        0.0001692244899385472, 0.00014552430869906852, 0.00016089446701032567,
        0.00015528360474768995, 0.00014907812943630193, 0.00015358259844239913,
        0.0001821484137172616, 0.0001479949271714512, 0.00015993047084293546,
        0.00015890521238493924, 0.00015899955594335, 0.0001638533401918562, 0.00021099948413241614,
        0.0001970209978493899, 0.0001964290397201546, 0.00020973311137984584,
        0.00022713461554500883, 0.0002233855269436479, 0.00020945778229833993,
        0.00021216615847729367, 0.00019549258771958566, 0.00020930214782238334,
        0.00020150276688164613, 0.00021545508715316864, 0.0002097383369095709,
        0.0002175452308073745, 0.00021380801957322234, 0.0001935846922582219,
        0.00020899558968876368, 0.00021065264931316403, 0.00019816485906676054,
        0.00022524067503879218, 0.00020285954868841103, 0.0002036919721398813,
        0.00019551790474395486, 0.00028072169502298, 0.00021438103441799345, 0.00020880615099480785,
        0.00018930784217076273, 0.00022767383823303597, 0.00024671705457598244,
        0.00019245926831437925, 0.00018976259910407232, 0.0002057873672706362,
        0.0002183418192301001, 0.00021659569393210797, 0.00019121938880297765,
        0.00020785810933752038, 0.00025270172695607317, 0.00022059489053936844,
        0.00021353966616939157, 0.00021863172519205447, 0.00019490975778990626,
        0.00019011246908402034, 0.0002550350034655099, 0.00019498380170897143,
        0.00019623873965473414, 0.00023434991043049568, 0.00021324366575906824,
        0.0002181143795230597, 0.00022122321617043997, 0.0002030801874134471,
        0.00022961237621587223, 0.00022006976925624048, 0.00022131615107603926,
        0.00019913238759462477, 0.00019656611088794755, 0.00019549483885300298,
        0.0002603793399278459, 0.0002226048673902289, 0.0001998622966642118, 0.0002015162765531726,
        0.00019629543729884, 0.00020717289017052718, 0.00021237143448544092, 0.00022068204800006493,
        0.0003056278956345399, 0.00047148578479058343, 0.00030763791663529315,
        0.0003453294070561605, 0.00031162597732687633, 0.00036846291537288856,
        0.00031382538025589887, 0.0002983187604075396, 0.0003124626340872317, 0.0003327579995989872,
        0.00032615639589127335, 0.0004203852586890787, 0.0002962418369349307,
        0.00034873865035435676, 0.0002883028869284929, 0.0003111614988873616,
        0.00029090759205865327, 0.00030172685568559393, 0.00035732802399928874,
        0.00030702882005275806, 0.0003159260048758394, 0.0003522988717396714,
        0.00031010834390370013, 0.0003406034563032662, 0.00030460359623915513,
        0.0003687960705929043, 0.00028759902572518536, 0.0003462189214089014,
        0.00033075089195896767, 0.0003536691724005775, 0.00031693238640579687,
        0.00033140956473665166, 0.00030657566738480997, 0.0003173698560276483,
        0.0003365073231790472, 0.0004405307569898105, 0.0003995971755599636, 0.0003484588714097438,
        0.00038960480595797895, 0.00027717763286357717, 0.0003056017857221795,
        0.00036276646627931354, 0.00032722152492527647, 0.0003328175459822696,
        0.00036682189160358505, 0.0003142106515004128, 0.00028508198932904324,
        0.00030723133283326446, 0.0003704223331107601, 0.00032692091475274135,
        0.0003138911478236845, 0.0003439435682850829, 0.00035613601016031715, 0.0003301371031971272,
        0.00031533572309898057, 0.000329640155583913, 0.000343660178194946, 0.0003297298459703703,
        0.00034180347584092255, 0.0002994739016046231, 0.0003005203935383216,
        0.00030610410304796477, 0.0003180172150528868, 0.00039756513393829725, 0.000545953220373274,
        0.0005455608815162405, 0.000563421426146401, 0.0004599156285463767, 0.0005467006936171206,
        0.000565182121602963, 0.0004796310561812576, 0.0005192499679020931, 0.000487953179676923,
        0.0005643143369443112, 0.0005205204577700961, 0.0005497454746974923, 0.0004804671699017416,
        0.0005638762217964383, 0.0005397500879598149, 0.0004919651592363928, 0.0005646951467101565,
        0.0005662201611722754, 0.0005221794801309257, 0.0004954202510082048, 0.0004833502239909566,
        0.0005640295937842972, 0.0005552865773879321, 0.0005647712983398829, 0.0004991053376687915,
        0.0005024748058599318, 0.0005653649761822144, 0.0005373106481612052, 0.0005657076934483129,
        0.0004902600183616147, 0.00046938352911203953, 0.0004896992857270433, 0.0005645048588930603,
        0.0004820364234871866, 0.0004992598470224089, 0.0004982535984414448, 0.0005410516158036109,
        0.0004921644503796936, 0.0004877604188766612, 0.0004712585672089005, 0.0004985662444225907,
        0.0005448480801367116, 0.0005641494840933627, 0.0005139347710384762, 0.0005654642125794828,
        0.0005644155892832434, 0.000567555003386966, 0.0005640995431897212, 0.0005669437409094025,
        0.0005512555677095954, 0.0005537660673551099, 0.0005667898653887854, 0.0005096386346874011,
        0.0005654332353850221, 0.0005664067622075892, 0.0004890204797149504, 0.0005545737898934132,
        0.0005669918636271706, 0.0005667174092598487, 0.0005667238743524449, 0.0005093476490359372,
        0.0005616800806126721, 0.0005141405937697939, 0.00046361582071824755, 0.0, 0.0, 0.0, 0.0,
        0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
        0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
        0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
        0.0, 0.0, 0.0, 0.0, 0.0, 0.0
    ]).reshape((8, 16, 4)),
}
LSE_PLUS_INF_OK = True  # +inf passes as the LSE of a row with no visible key
# SHA-256 of the harness's inputs for this case (input_digest): make_inputs() must give exactly these
INPUTS_SHA256 = "fc9be2437638bf6cf606879aaecaf6f318d970f93a87f65aaa27d23dbc720667"


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


def _page_permutation(rng, num_pages, dense_index):
    """A seeded permutation of the pool's pages that is not the identity and leaves no real page at its dense index."""
    n_real = len(dense_index)
    perm = rng.permutation(num_pages)
    for _ in range(64):
        real = perm[:n_real]
        if n_real == 0 or not ((real == np.arange(n_real)).all() or (real == dense_index).all()):
            return perm
        perm = rng.permutation(num_pages)
    return np.roll(np.arange(num_pages), 1)


def paged_storage(seed, page_size, k, v, seqlens_k):
    """K/V stored in pages behind a block table (SEMANTICS.md §16), as attention-conformance stores them.

    k_pool [num_pages, Hkv, page_size, d], v_pool [num_pages, Hkv, page_size, dv], block_table int32 [B, pages];
    key j of batch b is pool[block_table[b, j // page_size], :, j % page_size]. The real pages sit at a seeded
    random permutation of the pool; decoy pages, the slots past each sequence's length and the table entries past its
    used pages (they name decoys) hold NaN: a kernel told the lengths must not read them.
    """
    B, Hkv, Lk, d = k.shape
    pages_per_seq = -(-Lk // page_size)
    lens = [Lk if seqlens_k is None else min(int(seqlens_k[b]), Lk) for b in range(B)]
    need = [-(-n // page_size) for n in lens]
    dense_index = np.array([b * pages_per_seq + p for b in range(B) for p in range(need[b])], dtype=np.int64)
    n_real = len(dense_index)
    num_pages = n_real + 2 + n_real // 4
    rng = np.random.default_rng([seed, 0x9A6ED])
    slot = _page_permutation(rng, num_pages, dense_index)
    decoys = slot[n_real:]
    k_pool = np.full((num_pages, Hkv, page_size, d), np.nan)
    v_pool = np.full((num_pages, Hkv, page_size, v.shape[3]), np.nan)
    table = np.empty((B, pages_per_seq), dtype=np.int32)
    i = 0
    for b in range(B):
        for p in range(need[b]):
            j0, j1 = p * page_size, min((p + 1) * page_size, lens[b])
            k_pool[slot[i], :, : j1 - j0] = k[b, :, j0:j1]
            v_pool[slot[i], :, : j1 - j0] = v[b, :, j0:j1]
            table[b, p] = slot[i]
            i += 1
        table[b, need[b]:] = rng.choice(decoys, size=pages_per_seq - need[b])
    return {"k_pool": k_pool, "v_pool": v_pool, "block_table": table}


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
    """The inputs of the case, as attention-conformance makes them (conformance/cases/inputs.py) from seed 1944868457:
    float64 arrays whose values are exact in float16. The digest check in main() proves they are the harness's."""
    rng = np.random.default_rng(1944868457)
    q = rng.standard_normal((8, 16, 4, 64))
    k = rng.standard_normal((8, 2, 8192, 64))
    v = rng.standard_normal((8, 2, 8192, 64))
    q, k, v = (round_to(x, "float16") for x in (q, k, v))  # exact in float16 (SEMANTICS.md §1)
    pages = paged_storage(1944868457, 128, k, v, [8192, 8000, 4097, 4096, 1000, 257, 64, 0])  # SEMANTICS.md §16
    return {"q": q, "k": k, "v": v} | pages


def expected_values(inp):
    """The expected values in float64 (SEMANTICS.md): out and lse."""
    return reference_attention(
        inp["q"], inp["k"], inp["v"], scale=None, causal=True, alignment="bottom_right",
        window=None, chunk=None, softcap=None, mask=inp.get("mask"), bias=inp.get("bias"),
        seqlens_q=None, seqlens_k=[8192, 8000, 4097, 4096, 1000, 257, 64, 0], sinks=inp.get("sinks"))


def cannot_run_here():
    """Why this file cannot make its call here (exit status 2), or None."""
    try:
        import torch
    except ImportError as exc:
        return f"needs torch ({exc})"
    if not torch.cuda.is_available():
        return ("needs CUDA: flash-attn-4 runs on CUDA (sm90 (Hopper); the claims here are FA4's sm90 path); "
                f"torch {torch.__version__} sees no CUDA device")
    try:
        import flash_attn.cute  # noqa: F401
    except ImportError as exc:
        return f"needs flash-attn-4 (import flash_attn.cute: {exc})"
    return None


def versions():
    """The versions this run used, for the report."""
    import torch

    parts = [f"torch {torch.__version__}"]
    try:
        import importlib.metadata

        parts.append(f"flash-attn-4 {importlib.metadata.version('flash-attn-4')}")
    except Exception:  # no distribution metadata
        parts.append("flash-attn-4 (version unknown)")
    parts.append(f"{torch.cuda.get_device_name()} (sm{''.join(map(str, torch.cuda.get_device_capability()))})")
    return ", ".join(parts)


def run_library(inp):
    """The call under test: flash-attn-4 (flash_attn.cute) flash_attn_varlen_func over page caches with page_table and
    seqused_k, forward only. Returns float64 arrays in [B, H, L, D] order."""
    import torch
    from flash_attn.cute import flash_attn_varlen_func

    def fa(requires_grad, want_lse):
        _, q = as_tensor(inp["q"], torch.float16, DEVICE, "contiguous", requires_grad)
        sink = None
        # the pools [num_pages, Hkv, page_size, d] as flash-attn's caches [num_pages, page_size, Hkv, d]
        k_pool = np.ascontiguousarray(inp["k_pool"].transpose(0, 2, 1, 3))
        v_pool = np.ascontiguousarray(inp["v_pool"].transpose(0, 2, 1, 3))
        table = inp["block_table"]
        # FA4's documented precondition: the slots past seqused_k in a sequence's last, partially used
        # page are read, so they are made finite; every page and table entry a sequence does not use
        # keeps NaN
        for b, n in enumerate([8192, 8000, 4097, 4096, 1000, 257, 64, 0]):
            used = -(-n // 128)
            if used and n % 128:
                k_pool[table[b, used - 1], n % 128:] = 0.0
                v_pool[table[b, used - 1], n % 128:] = 0.0
        k = torch.from_numpy(k_pool).to(torch.float16).to(DEVICE)
        v = torch.from_numpy(v_pool).to(torch.float16).to(DEVICE)
        page_table = torch.from_numpy(table).to(DEVICE)
        kw = dict(softmax_scale=None, causal=True, return_lse=want_lse, window_size=(None, 0),
                  page_table=page_table,
                  seqused_k=torch.tensor([8192, 8000, 4097, 4096, 1000, 257, 64, 0], dtype=torch.int32, device=DEVICE))
        res = flash_attn_varlen_func(q.transpose(1, 2), k, v, **kw)  # [B, L, H, D]
        out, lse = (res[0], res[1] if len(res) > 1 else None) if isinstance(res, (tuple, list)) else (res, None)
        out = out.transpose(1, 2)
        return (q, k, v, sink), out, (lse if want_lse else None)

    _, out, lse = fa(False, True)
    result = {"out": out, "lse": lse}
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
