#include <stdio.h>
#include <utf8proc.h>
int main(void){
  for(int32_t c=0;c<=0x10FFFF;c++){
    if(c>=0xD800&&c<=0xDFFF) continue;
    utf8proc_category_t k=utf8proc_category(c);
    int other=(k==UTF8PROC_CATEGORY_CC||k==UTF8PROC_CATEGORY_CF||k==UTF8PROC_CATEGORY_CO||k==UTF8PROC_CATEGORY_CS);
    int punct=(k>=UTF8PROC_CATEGORY_PC&&k<=UTF8PROC_CATEGORY_PO);
    int mn=k==UTF8PROC_CATEGORY_MN;
    utf8proc_int32_t d[32]; int last=0; utf8proc_ssize_t n=utf8proc_decompose_char(c,d,32,UTF8PROC_DECOMPOSE,&last);
    int dec=!(n==1&&d[0]==c);
    printf("%x\t%d\t%d\t%d\t%d\t%x\t%d\n",c,other,punct,mn,dec,utf8proc_tolower(c),utf8proc_get_property(c)->combining_class);
  }
}
