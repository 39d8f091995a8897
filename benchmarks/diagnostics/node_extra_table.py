"""One-off: would a per-size graph_node_extra help? Each of the eighth to
eleventh precision sweeps' calibrations timed the replayed step at the
smallest and largest H and b in each precision (calibrate.log, "graph step
... us a kernel"); the machine file keeps their median. Here every graph
step of those sweeps is predicted again with its own (precision, H, b)'s
figure, bilinear in log H and log b between the four measured corners of
its precision (clamped), beside the median's (not blind: the current code
on the committed calibrations). Run from the project root:

    python benchmarks/diagnostics/node_extra_table.py > reports/h100/benchmarks/node-extra-table.txt
"""
import csv
import dataclasses
import math
import re

import numpy as np

from perfmlp.model.machine import load_machine
from perfmlp.model.predict import predict_batch
def table(n):
    pts={}
    for l in open(f'reports/h100/benchmarks/validate-precision{n}/calibrate.log'):
        m=re.match(r'graph step (\w+) H=(\d+) b=(\d+): .*: ([+-][\d.]+) us a kernel',l)
        if m: pts[(m.group(1),int(m.group(2)),int(m.group(3)))]=float(m.group(4))*1e-6
    return pts
def interp(pts,prec,H,b):
    P=[(h,bb,s) for (p,h,bb),s in pts.items() if p==prec] or [(h,bb,s) for (p,h,bb),s in pts.items()]
    hs=sorted({h for h,_,_ in P}); bs=sorted({bb for _,bb,_ in P})
    val={(h,bb):s for h,bb,s in P}
    def frac(x,lo,hi):
        if hi==lo: return 0.0
        return min(1,max(0,(math.log(x)-math.log(lo))/(math.log(hi)-math.log(lo))))
    fh=frac(H,hs[0],hs[-1]); fb=frac(b,bs[0],bs[-1])
    g=lambda h,bb: val.get((h,bb))
    v=(1-fh)*(1-fb)*g(hs[0],bs[0])+fh*(1-fb)*g(hs[-1],bs[0])+(1-fh)*fb*g(hs[0],bs[-1])+fh*fb*g(hs[-1],bs[-1])
    return max(0.0,v)
rows=[r for r in csv.DictReader(open('reports/blind-tests.csv')) if r['machine']=='h100' and r['exec']=='graph']
out=[]
for n in (8,9,10,11):
    pts=table(n); m=load_machine(f'reports/h100/benchmarks/validate-precision{n}/calibrated.yaml')
    for r in [r for r in rows if r['sweep']==f'h100/validate-precision{n}']:
        H,B=int(r['hidden_sizes']),int(r['batch_size'])
        args=((784,H,10),B,1,r['precision'],r['comm'],r['batch_transfer'],'counters')
        a=predict_batch(m,*args,exec_mode='graph').total_s
        m2=dataclasses.replace(m,graph_node_extra_s=interp(pts,r['precision'],H,B))
        b=predict_batch(m2,*args,exec_mode='graph').total_s
        meas=float(r['measured_s'])
        out.append((n,r,a/meas-1,b/meas-1,float(r['spread']),m.graph_node_extra_s,m2.graph_node_extra_s))
print('sweep configuration: error with the median figure, with the table (the figure us a kernel) spread')
for n,r,a,b,sp,x0,x1 in out:
    print(n,'H%-5s B%-6s %-5s %-18s %-10s median-extra %+6.1f%%  table %+6.1f%%  (%.2f -> %.2f us) spread %.3f'%(r['hidden_sizes'],r['batch_size'],r['precision'],r['batch_transfer'],r['comm'],a*100,b*100,x0*1e6,x1*1e6,sp))
A=np.array([(a,b,sp) for n,r,a,b,sp,_,_ in out])
for j,nm in ((0,'median'),(1,'table')):
    ag=A[A[:,2]<0.03]   # (the eighth's single runs have spread 0)
    print(nm,'graph all: med|e| %.2f%% p90 %.1f%% signed %+.2f%% | agreeing(%d) med %.2f worst %.1f'%(np.median(abs(A[:,j]))*100,np.percentile(abs(A[:,j]),90)*100,np.median(A[:,j])*100,len(ag),np.median(abs(ag[:,j]))*100,max(abs(ag[:,j]))*100))
nearer=sum(abs(b)<abs(a)-1e-4 for _,_,a,b,_,_,_ in out); further=sum(abs(b)>abs(a)+1e-4 for _,_,a,b,_,_,_ in out)
print(f"moved nearer {nearer}, further {further} of {len(out)}")
