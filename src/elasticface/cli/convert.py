"""`elasticface-convert`: convert between face data formats (the functions are in `elasticface.data.convert`).

    elasticface-convert folder2rec IMAGE_ROOT OUT_DIR      # -> OUT_DIR/train.rec/.idx/property
    elasticface-convert rec2folder REC_ROOT OUT_DIR        # -> OUT_DIR/<label>/<key>.jpg
    elasticface-convert pairs2bin PAIRS IMAGE_ROOT OUT.bin # 'path1 path2 0|1' list -> insightface .bin
    elasticface-convert pairs2bin pairs.txt lfw_aligned/ lfw.bin   # LFW's own pairs.txt, <Name>/<Name>_0001.jpg
    elasticface-convert pairs2bin cfp/Protocol/Split/FP cfp_aligned/ cfp_fp.bin   # CFP's protocol folder
    elasticface-convert reindex REC_ROOT                   # rebuild a lost train.idx (im2rec order)
    elasticface-convert lowres FACES OUT_DIR --size 16-32  # the same faces at 16-32 px, blown back to 112

An output that exists is refused (exit 2) unless `--overwrite`: rec2folder's and lowres' OUT_DIR when it holds
entries, folder2rec's train.rec/.idx/property, pairs2bin's .bin. reindex replaces the index it rebuilds.
The same command as `python -m elasticface.cli.convert`.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from elasticface.cli.preflight import contract, start
from elasticface.cli.version import add_version_argument

OVERWRITE_HELP = "write over existing outputs (default: refuse an output file that exists or a folder with entries)"


@contract("elasticface-convert")
def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="elasticface-convert", description=__doc__.split("\n\n")[0])
    add_version_argument(parser)
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("folder2rec", help="image folder (one sub-folder per identity) -> train.rec/.idx/property")
    p.add_argument("image_root")
    p.add_argument("out_dir")
    p.add_argument("--prefix", default="train")
    p.add_argument("--image-size", type=int, default=112)
    p.add_argument("--quality", type=int, default=95)
    p.add_argument("--overwrite", action="store_true", help=OVERWRITE_HELP)
    p = sub.add_parser("rec2folder", help="train.rec/.idx -> OUT_DIR/<label>/<key>.jpg")
    p.add_argument("rec_root")
    p.add_argument("out_dir")
    p.add_argument("--prefix", default="train")
    p.add_argument("--overwrite", action="store_true", help=OVERWRITE_HELP)
    p = sub.add_parser("pairs2bin", help="pairs list ('path1 path2 0|1', LFW's pairs.txt or CFP's split folder) "
                                         "-> insightface .bin")
    p.add_argument("pairs_file", help="'path1 path2 0|1' lines, LFW's pairs.txt (header '10 300', then "
                                      "'name n1 n2' and 'name1 n1 name2 n2' lines), or CFP's Protocol/Split/FP|FF")
    p.add_argument("image_root", help="the folder the paths are relative to; for LFW's pairs.txt an LFW-layout "
                                      "folder <Name>/<Name>_0001.jpg, for CFP a folder in Data/Images' layout")
    p.add_argument("out_path")
    p.add_argument("--image-size", type=int, default=112)
    p.add_argument("--quality", type=int, default=95)
    p.add_argument("--overwrite", action="store_true", help=OVERWRITE_HELP)
    p = sub.add_parser("reindex", help="rebuild a missing train.idx by scanning train.rec")
    p.add_argument("rec_root")
    p.add_argument("--prefix", default="train")
    p = sub.add_parser("lowres", help="aligned faces -> the same layout with each face shrunk to 16-32 px and blown "
                                      "back (a low-resolution domain)")
    p.add_argument("faces", help="a folder of aligned faces (searched recursively)")
    p.add_argument("out_dir")
    p.add_argument("--size", default="16-32", help="the size in pixels each face passes through, or a range the "
                                                   "size of each is drawn from by a hash of its path (16-32)")
    p.add_argument("--seed", type=int, default=0, help="another draw of the sizes")
    p.add_argument("--quality", type=int, default=95)
    p.add_argument("--overwrite", action="store_true", help=OVERWRITE_HELP)
    args = parser.parse_args(argv)
    start(parser.prog, [])
    from elasticface.data import convert  # here, so that --help answers without importing torch

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    if args.cmd == "folder2rec":
        out = convert.write_recordio(args.image_root, args.out_dir, args.prefix, args.image_size, args.quality,
                                     overwrite=args.overwrite)
    elif args.cmd == "rec2folder":
        out = convert.recordio_to_folder(args.rec_root, args.out_dir, args.prefix, overwrite=args.overwrite)
    elif args.cmd == "pairs2bin":
        out = convert.pairs_to_bin(args.pairs_file, args.image_root, args.out_path, args.image_size, args.quality,
                                   overwrite=args.overwrite)
    elif args.cmd == "lowres":
        from elasticface.data.low_resolution import degrade_folder, parse_sizes

        out = degrade_folder(args.faces, args.out_dir, parse_sizes(args.size), args.seed, args.quality,
                             overwrite=args.overwrite)
    else:
        out = {"records": convert.rebuild_index(args.rec_root, args.prefix)}
    print(" ".join(f"{k}={v}" for k, v in out.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
