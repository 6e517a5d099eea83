# ruff: noqa
# Kept as used for BENCHMARKS.md (issue 30, session 25): `python3 <this> <folder> 2d 3d` over ncu-2d.csv / ncu-3d.csv written by vcycle-kernels-ncu-2026-11-29.py under ncu (its header), with launch__grid_size added; prints the second V-cycle. Its TB/s column is off by 1e3 (MB/us is TB/s): BENCHMARKS.md quotes MB and us.
import csv,io,sys
U={"ns":1e-3,"nsecond":1e-3,"us":1,"usecond":1,"byte":1e-6,"Kbyte":1e-3,"Mbyte":1,"Gbyte":1e3}
for p in sys.argv[2:]:
    lines=[l for l in open(f"{sys.argv[1]}/ncu-{p}.csv") if l.startswith('"')]
    rows=list(csv.reader(io.StringIO("".join(lines))))
    hdr=rows[0]; units=rows[1]; data=rows[2:]
    f=lambda d,name: float(d[hdr.index(name)].replace(",",""))*U[units[hdr.index(name)]]
    ki=hdr.index("Kernel Name"); g=hdr.index("launch__grid_size")
    half=data[len(data)//2:]
    tot=0; totmb=0
    print(p)
    for d in half:
        us=f(d,"gpu__time_duration.sum"); mb=f(d,"dram__bytes_read.sum")+f(d,"dram__bytes_write.sum")
        tot+=us; totmb+=mb
        print(f"  {d[ki][:58]:58s} grid {d[g]:>6s} {us:7.1f} us {mb:8.2f} MB {mb/us*1e-3:6.2f} TB/s")
    print("  sum", round(tot,1), "us", round(totmb,1), "MB")
